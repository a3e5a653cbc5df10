-- Business schema of the bundled incident (2026-11-28, payment-api DB pool exhaustion).
-- All timestamps are UTC. Loaded by scripts/setup_mysql.py after CREATE DATABASE; USE.
-- Statements are separated by a semicolon at the end of a line.

CREATE TABLE orders (
    id            VARCHAR(32)  NOT NULL PRIMARY KEY,
    user_id       VARCHAR(32)  NOT NULL,
    amount_cents  INT          NOT NULL,
    currency      CHAR(3)      NOT NULL,
    status        VARCHAR(32)  NOT NULL,
    created_at    DATETIME     NOT NULL,
    updated_at    DATETIME     NOT NULL,
    KEY idx_orders_created_at (created_at),
    KEY idx_orders_status (status)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

CREATE TABLE payments (
    id            VARCHAR(32)  NOT NULL PRIMARY KEY,
    order_id      VARCHAR(32)  NOT NULL,
    provider      VARCHAR(16)  NOT NULL,
    status        VARCHAR(16)  NOT NULL,
    error_code    VARCHAR(64)  NULL,
    latency_ms    INT          NOT NULL,
    created_at    DATETIME     NOT NULL,
    KEY idx_payments_order_id (order_id),
    KEY idx_payments_created_at (created_at),
    KEY idx_payments_status (status, error_code)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

CREATE TABLE deployments (
    id             INT          NOT NULL PRIMARY KEY,
    service        VARCHAR(64)  NOT NULL,
    version        VARCHAR(32)  NOT NULL,
    deployed_at    DATETIME     NOT NULL,
    deployed_by    VARCHAR(64)  NOT NULL,
    change_summary VARCHAR(500) NOT NULL,
    KEY idx_deployments_service (service, deployed_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

CREATE TABLE db_pool_metrics (
    service     VARCHAR(64) NOT NULL,
    sampled_at  DATETIME    NOT NULL,
    pool_size   INT         NOT NULL,
    in_use      INT         NOT NULL,
    waiting     INT         NOT NULL,
    PRIMARY KEY (service, sampled_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- Provider credentials: present in the business database, NEVER granted to the read-only
-- diagnosis account and excluded from the documented allowlist.
CREATE TABLE api_credentials (
    id            VARCHAR(32)  NOT NULL PRIMARY KEY,
    provider      VARCHAR(16)  NOT NULL,
    api_key       VARCHAR(128) NOT NULL,
    secret_token  VARCHAR(128) NOT NULL,
    rotated_at    DATETIME     NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
