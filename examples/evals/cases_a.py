"""Suite cases 1-5: pool exhaustion, slow query after an index drop, provider outage, bad flag
rollout, disk full through disabled retention. See ``generate.py``."""

from __future__ import annotations

from _build import CaseData, Logs, Script, draft, finding, negative, sql_rows


def pool_exhaustion() -> CaseData:
    """Derived from the demo incident (examples/incident), smaller. Decoy: the PSP stripe."""
    logs = Logs()
    logs.every(
        "payment-api", "2026-11-28T09:00:00Z", "2026-11-28T11:00:00Z", 60, "INFO",
        ["POST /v1/payments 201 in 3{n:02d}ms psp=stripe", "GET /healthz 200 in 2ms"],
    )
    logs.add("payment-api", "2026-11-28T10:02:00Z", "INFO",
             "starting payment-api v2.14.0 (db pool max_size=10, reconciliation query enabled)")
    logs.every(
        "payment-api", "2026-11-28T10:05:00Z", "2026-11-28T10:41:00Z", 20, "ERROR",
        ["db pool exhausted: timed out after 3000ms waiting for connection "
         "(pool max_size=10, in_use=10)",
         "POST /v1/payments 503 in 3004ms order=ord_{n} error=DB_POOL_TIMEOUT"],
        offset=2,
    )
    logs.add("payment-api", "2026-11-28T10:41:00Z", "INFO", "starting payment-api v2.13.4")
    logs.every(
        "order-service", "2026-11-28T10:05:30Z", "2026-11-28T10:41:00Z", 40, "WARN",
        ["payment-api returned 503 for order ord_{n}; marking PAYMENT_PENDING"],
    )
    logs.every(
        "stripe-gateway", "2026-11-28T09:00:00Z", "2026-11-28T11:00:00Z", 90, "INFO",
        ["charge ok latency_ms=2{n:02d} status=succeeded"],
    )
    for moment in ("2026-11-28T10:07:10Z", "2026-11-28T10:15:40Z"):
        logs.add("stripe-gateway", moment, "WARN",
                 "stripe API latency 850ms above 800ms threshold (POST /v1/charges)")
    mysql = """
CREATE TABLE deployments (
  id INT PRIMARY KEY AUTO_INCREMENT,
  service VARCHAR(64) NOT NULL,
  version VARCHAR(32) NOT NULL,
  deployed_at DATETIME NOT NULL,
  change_summary VARCHAR(255) NOT NULL
);
CREATE TABLE payments (
  id INT PRIMARY KEY AUTO_INCREMENT,
  order_id VARCHAR(32) NOT NULL,
  status VARCHAR(16) NOT NULL,
  error_code VARCHAR(32) NULL,
  created_at DATETIME NOT NULL
);
""" + sql_rows(
        "deployments", ["service", "version", "deployed_at", "change_summary"],
        [("stripe-gateway", "1.8.2", "2026-11-28 09:30:00", "rotate stripe webhook secret"),
         ("payment-api", "v2.14.0", "2026-11-28 10:02:00",
          "reduce DB pool max_size 50 -> 10; add payment reconciliation query"),
         ("payment-api", "v2.13.4", "2026-11-28 10:41:00", "rollback")],
    ) + sql_rows(
        "payments", ["order_id", "status", "error_code", "created_at"],
        [(f"ord_{10200 + i}", "FAILED" if 15 <= i < 40 and i % 7 else "PAID",
          "DB_POOL_TIMEOUT" if 15 <= i < 40 and i % 7 else None,
          f"2026-11-28 {9 + (i * 90) // 3600:02d}:{(i * 90) % 3600 // 60:02d}:00")
         for i in range(60)],
    )
    runbooks = {
        "db-connection-pool.en.md": """
# DB connection pool exhaustion

## Symptoms
`db pool exhausted: timed out waiting for connection` in the service log, 503 answers.

## First checks
Look for a recent deploy that changed the pool size (`max_size`) or added long queries.
Roll back the deploy when the pool size was reduced.
""",
        "third-party-psp.en.md": """
# Payment provider (PSP) trouble

## Symptoms
stripe-gateway ERROR lines, `charge failed`, HTTP 5xx from the provider, provider status page red.
Occasional latency warnings under 1 s are normal and not an outage.
""",
    }
    query = "payment-api 5xx since 10:05, orders stuck in payment — what's going on?"
    good = (
        Script("Competent run: payment-api errors, runbook, deployments, the PSP ruled out.")
        .call("call_logs_pay", "query_logs",
              {"service": "payment-api", "start": "2026-11-28T10:00:00Z",
               "end": "2026-11-28T10:20:00Z", "level": "ERROR", "limit": 10})
        .call("call_kb_pool", "lookup_knowledge",
              {"query": "payment-api db pool exhausted 503", "top_k": 2})
        .call("call_sql_deploys", "query_mysql",
              {"sql": "SELECT service, version, deployed_at, change_summary FROM deployments "
                      "WHERE deployed_at BETWEEN '2026-11-28 09:00:00' AND '2026-11-28 10:20:00' "
                      "ORDER BY deployed_at",
               "purpose": "deployments before and during the incident window"})
        .call("call_logs_psp", "query_logs",
              {"service": "stripe-gateway", "start": "2026-11-28T10:00:00Z",
               "end": "2026-11-28T10:20:00Z", "level": "ERROR", "limit": 10}, items=False)
        .final(draft(
            summary="payment-api v2.14.0 (deployed 10:02 UTC) cut its DB pool max_size from 50 "
                    "to 10; since 10:05 requests time out waiting for a connection and "
                    "POST /v1/payments answers 503.",
            cites=("call_logs_pay", "call_sql_deploys"),
            analysis=[
                finding("payment-api ERROR lines since 10:05: 'db pool exhausted ... "
                        "(pool max_size=10, in_use=10)' and 503 on POST /v1/payments.",
                        "call_logs_pay"),
                finding("payment-api v2.14.0 deployed 10:02 UTC: 'reduce DB pool max_size "
                        "50 -> 10; add payment reconciliation query'.", "call_sql_deploys"),
                finding("The pool runbook says to roll back a deploy that reduced the pool.",
                        "call_kb_pool"),
                negative("No stripe-gateway ERROR lines 10:00-10:20 UTC.", "call_logs_psp"),
            ],
            actions=["Roll payment-api back to v2.13.4.",
                     "Watch the DB_POOL_TIMEOUT errors stop after the rollback."],
            recommendations=["Review pool-size changes against peak concurrency."],
            checked=["payment-api ERROR logs 10:00-10:20 UTC", "pool runbook",
                     "deployments 09:00-10:20 UTC", "stripe-gateway ERROR logs 10:00-10:20 UTC"],
            missing=["Database server metrics were not checked."],
        ))
    )
    decoy = (
        Script("MUST FAIL: blames the decoy (stripe latency warnings), never checks payment-api.")
        .call("call_logs_psp", "query_logs",
              {"service": "stripe-gateway", "start": "2026-11-28T10:00:00Z",
               "end": "2026-11-28T10:20:00Z", "level": "WARN", "limit": 10})
        .final(draft(
            summary="The payment provider stripe is slow (850ms latency warnings since 10:07), "
                    "so payments fail with 5xx.",
            cites=("call_logs_psp",), confidence="MEDIUM",
            analysis=[finding("stripe-gateway warns about 850ms latency at 10:07 and 10:15.",
                              "call_logs_psp")],
            actions=["Open a ticket with stripe."], recommendations=[],
            checked=["stripe-gateway WARN logs 10:00-10:20 UTC"], missing=[],
        ))
    )
    fenced = (
        Script("MUST FAIL: the final text is wrapped in a Markdown fence (strict Draft refuses).")
        .call("call_logs_pay", "query_logs",
              {"service": "payment-api", "start": "2026-11-28T10:00:00Z",
               "end": "2026-11-28T10:20:00Z", "level": "ERROR", "limit": 10})
        .final("```json\n" + draft(
            summary="payment-api v2.14.0 exhausted its DB pool.", cites=("call_logs_pay",),
            analysis=[], actions=[], recommendations=[],
            checked=["payment-api ERROR logs 10:00-10:20 UTC"], missing=[],
        ) + "\n```")
    )
    return CaseData(
        case={
            "id": "pool-exhaustion",
            "query": query,
            "asked_at": "2026-11-28T10:20:00Z",
            "previous_turn": None,
            "expect": {
                "outcome": "DRAFT", "conclusion": "REQUIRED",
                "root_cause_any": ["pool"], "root_cause_all": ["v2.14.0"],
                "must_not_mention": ["stripe"], "must_cite_tools": ["query_logs", "query_mysql"],
            },
            "note": "Decoy: stripe-gateway latency warnings (the PSP is healthy).",
        },
        logs=logs,
        runbooks=runbooks,
        mysql=mysql,
        cassettes={
            "cassette.json": good,
            "cassette.fail-blames-decoy.json": decoy,
            "cassette.fail-invalid-draft.json": fenced,
        },
    )


def slow_query_index_drop() -> CaseData:
    """Decoy: the web-frontend release at 14:00."""
    logs = Logs()
    logs.every(
        "order-service", "2026-12-03T13:00:00Z", "2026-12-03T14:06:00Z", 60, "INFO",
        ["GET /v1/orders?customer_id=c_{n} 200 in 4{n:01d}ms"],
    )
    logs.every(
        "order-service", "2026-12-03T14:06:00Z", "2026-12-03T15:00:00Z", 30, "WARN",
        ["slow query 4210ms: SELECT id, status, total FROM orders WHERE customer_id = ? "
         "ORDER BY created_at DESC LIMIT 20 (rows_examined=1843002)",
         "GET /v1/orders?customer_id=c_{n} 200 in 4388ms"],
    )
    logs.add("web-frontend", "2026-12-03T14:00:00Z", "INFO",
             "web-frontend v3.2.0 started (new checkout page layout)")
    logs.every(
        "web-frontend", "2026-12-03T14:00:30Z", "2026-12-03T15:00:00Z", 300, "WARN",
        ["asset bundle main.js is 1.9 MB (budget 1.5 MB)"],
    )
    mysql = """
CREATE TABLE deployments (
  id INT PRIMARY KEY AUTO_INCREMENT,
  service VARCHAR(64) NOT NULL,
  version VARCHAR(32) NOT NULL,
  deployed_at DATETIME NOT NULL,
  change_summary VARCHAR(255) NOT NULL
);
CREATE TABLE schema_migrations (
  version VARCHAR(32) PRIMARY KEY,
  description VARCHAR(255) NOT NULL,
  applied_at DATETIME NOT NULL
);
""" + sql_rows(
        "deployments", ["service", "version", "deployed_at", "change_summary"],
        [("web-frontend", "v3.2.0", "2026-12-03 14:00:00", "new checkout page layout"),
         ("order-service", "v4.7.1", "2026-12-01 09:12:00", "pagination fix")],
    ) + sql_rows(
        "schema_migrations", ["version", "description", "applied_at"],
        [("20261128_0930", "add column orders.gift_note", "2026-11-28 09:30:00"),
         ("20261203_1405", "drop index idx_orders_customer_created on orders (cleanup)",
          "2026-12-03 14:05:00")],
    )
    runbooks = {
        "mysql-slow-query.zh.md": """
# MySQL 慢查询排查

## 症状
服务日志出现 `slow query`，`rows_examined` 很大，接口延迟升高。

## 检查
先看最近的 schema 变更（schema_migrations），特别是删除索引（drop index）。
""",
        "frontend-release.en.md": """
# Frontend releases

A web-frontend release changes only static assets; it cannot slow down backend APIs.
""",
    }
    query = "订单列表接口从 14:10 开始 p99 很慢，帮忙看下原因"
    good = (
        Script("Competent run: slow-query warnings, then schema migrations, decoy deploy seen.")
        .call("call_logs_orders", "query_logs",
              {"service": "order-service", "start": "2026-12-03T14:00:00Z",
               "end": "2026-12-03T14:40:00Z", "level": "WARN", "limit": 10})
        .call("call_sql_migrations", "query_mysql",
              {"sql": "SELECT version, description, applied_at FROM schema_migrations "
                      "WHERE applied_at >= '2026-12-03 00:00:00' ORDER BY applied_at",
               "purpose": "schema changes on the incident day"})
        .call("call_sql_deploys", "query_mysql",
              {"sql": "SELECT service, version, deployed_at, change_summary FROM deployments "
                      "WHERE deployed_at >= '2026-12-03 00:00:00' ORDER BY deployed_at",
               "purpose": "deployments on the incident day"}, evaluation="NO_GAIN")
        .final(draft(
            summary="14:05 的迁移 20261203_1405 删除了 orders 表的索引 "
                    "idx_orders_customer_created，按 customer_id 查订单变成全表扫描"
                    "（rows_examined≈184 万，约 4.2 秒），订单列表接口因此变慢。",
            cites=("call_logs_orders", "call_sql_migrations"),
            analysis=[
                finding("order-service 自 14:06 起持续出现 slow query 4210ms，"
                        "rows_examined=1843002。", "call_logs_orders"),
                finding("schema_migrations 显示 14:05 执行了 drop index "
                        "idx_orders_customer_created。", "call_sql_migrations"),
                negative("当天唯一的发布是 14:00 的前端静态资源发布，与后端查询无关。",
                         "call_sql_deploys"),
            ],
            actions=["重新创建索引 idx_orders_customer_created (customer_id, created_at)。"],
            recommendations=["删除索引前先检查慢查询与执行计划。"],
            checked=["order-service WARN 日志 14:00-14:40 UTC", "当天 schema_migrations",
                     "当天 deployments"],
            missing=["未查看数据库服务器指标。"],
        ))
    )
    cites_nothing = (
        Script("MUST FAIL: right words, but cites no log or database evidence (only a runbook).")
        .call("call_kb", "lookup_knowledge", {"query": "订单 慢查询 索引", "top_k": 2})
        .final(draft(
            summary="订单列表变慢是因为 orders 表的索引被删除，查询变成全表扫描。",
            cites=("call_kb",), confidence="MEDIUM",
            analysis=[finding("手册提到删除索引会导致慢查询。", "call_kb")],
            actions=["重建索引。"], recommendations=[],
            checked=["慢查询手册"], missing=["未查看日志和数据库。"],
        ))
    )
    return CaseData(
        case={
            "id": "slow-query-index-drop",
            "query": query,
            "asked_at": "2026-12-03T14:40:00Z",
            "previous_turn": None,
            "expect": {
                "outcome": "DRAFT", "conclusion": "REQUIRED",
                "root_cause_any": ["idx_orders_customer_created", "索引", "index"],
                "must_not_mention": ["web-frontend", "v3.2.0"],
                "must_cite_tools": ["query_logs", "query_mysql"],
            },
            "note": "Decoy: the web-frontend v3.2.0 release at 14:00, five minutes earlier.",
        },
        logs=logs,
        runbooks=runbooks,
        mysql=mysql,
        cassettes={"cassette.json": good, "cassette.fail-cites-nothing.json": cites_nothing},
    )


def provider_outage() -> CaseData:
    """Decoy: a steady 'db pool usage 72%' warning that was there before the incident."""
    logs = Logs()
    logs.every(
        "payment-api", "2026-12-05T09:00:00Z", "2026-12-05T10:00:00Z", 60, "INFO",
        ["POST /v1/charges 201 in 2{n:02d}ms provider=acme-pay"],
    )
    logs.every(
        "payment-api", "2026-12-05T09:00:00Z", "2026-12-05T10:00:00Z", 300, "WARN",
        ["db pool usage 72% (36/50)"], offset=15,
    )
    logs.every(
        "payment-api", "2026-12-05T09:38:00Z", "2026-12-05T10:00:00Z", 20, "ERROR",
        ["acme-pay POST /charges failed: 502 Bad Gateway from api.acme-pay.example "
         "(attempt 3/3)",
         "acme-pay request timed out after 10000ms (POST /charges)"], offset=5,
    )
    logs.every(
        "checkout-web", "2026-12-05T09:38:30Z", "2026-12-05T10:00:00Z", 60, "ERROR",
        ["payment step failed: payment-api answered 502 for cart cart_{n}"],
    )
    runbooks = {
        "payment-provider-outage.en.md": """
# Payment provider (acme-pay) outage

## Symptoms
payment-api logs `acme-pay ... 502 Bad Gateway` or `acme-pay request timed out`.

## What to do
Check https://status.acme-pay.example, switch card traffic to the backup provider, tell support.
""",
        "db-pool.en.md": """
# DB pool usage warnings

`db pool usage N%` below 90% is informational; exhaustion shows as `db pool exhausted`.
""",
    }
    query = "Card payments in checkout started failing around 09:40 UTC. Is it us?"
    good = (
        Script("Competent run: payment-api errors name the provider; runbook confirms.")
        .call("call_logs_pay", "query_logs",
              {"service": "payment-api", "start": "2026-12-05T09:30:00Z",
               "end": "2026-12-05T09:55:00Z", "level": "ERROR", "limit": 10})
        .call("call_kb_psp", "lookup_knowledge",
              {"query": "acme-pay 502 Bad Gateway timed out provider outage", "top_k": 2})
        .final(draft(
            summary="Not us: the payment provider acme-pay is failing. Since 09:38 UTC its "
                    "POST /charges answers 502 Bad Gateway or times out after 10 s, so card "
                    "payments fail.",
            cites=("call_logs_pay",),
            analysis=[
                finding("payment-api ERROR lines since 09:38: 'acme-pay POST /charges failed: "
                        "502 Bad Gateway' and 'acme-pay request timed out after 10000ms'.",
                        "call_logs_pay"),
                finding("The provider runbook matches these symptoms: switch to the backup "
                        "provider.", "call_kb_psp"),
            ],
            actions=["Check the acme-pay status page.",
                     "Switch card traffic to the backup provider."],
            recommendations=["Alert on acme-pay 5xx rate separately from our own errors."],
            checked=["payment-api ERROR logs 09:30-09:55 UTC", "provider outage runbook"],
            missing=["No confirmation from acme-pay yet."],
        ))
    )
    return CaseData(
        case={
            "id": "provider-outage",
            "query": query,
            "asked_at": "2026-12-05T09:55:00Z",
            "expect": {
                "outcome": "DRAFT", "conclusion": "REQUIRED",
                "root_cause_any": ["acme-pay"], "must_not_mention": ["pool"],
                "must_cite_tools": ["query_logs"],
            },
            "note": "Decoy: 'db pool usage 72%' warnings, present all morning.",
        },
        logs=logs,
        runbooks=runbooks,
        cassettes={"cassette.json": good},
    )


def config_flag_rollout() -> CaseData:
    """Decoy: elasticsearch 'cluster health yellow' warnings since noon."""
    logs = Logs()
    logs.every(
        "search-api", "2026-12-08T15:00:00Z", "2026-12-08T16:40:00Z", 60, "INFO",
        ["GET /v1/search?q=item{n} 200 in 8{n:01d}ms"],
    )
    logs.every(
        "search-api", "2026-12-08T15:58:30Z", "2026-12-08T16:40:00Z", 15, "ERROR",
        ["ranker_v2 failed: model artifact ranker_v2.bin not found; "
         "returning 500 for GET /v1/search"],
    )
    logs.every(
        "config-service", "2026-12-08T15:00:00Z", "2026-12-08T16:40:00Z", 600, "INFO",
        ["config snapshot v{n} published"],
    )
    logs.add("config-service", "2026-12-08T15:58:00Z", "INFO",
             "flag search.new_ranker rollout changed 5% -> 100% by alice (change CHG-7731)")
    logs.every(
        "elasticsearch", "2026-12-08T12:00:00Z", "2026-12-08T16:40:00Z", 600, "WARN",
        ["cluster health yellow: 1 unassigned replica shard (index products_v7)"],
    )
    runbooks = {
        "feature-flags.zh.md": """
# 功能开关（feature flag）发布

## 症状
开关放量后服务报错，日志里出现新代码路径的错误（例如 ranker_v2）。

## 处理
在 config-service 把开关回退到上一个放量比例，确认错误消失后再排查。
""",
        "elasticsearch-health.en.md": """
# Elasticsearch cluster health

`yellow` means a replica shard is unassigned; searches still succeed. `red` loses data.
""",
    }
    query = "search-api 从 16:00 开始大量 500，用户搜不到东西，怎么回事？"
    good = (
        Script("Competent run: search-api errors, the flag change, ES yellow judged no gain.")
        .call("call_logs_search", "query_logs",
              {"service": "search-api", "start": "2026-12-08T15:50:00Z",
               "end": "2026-12-08T16:30:00Z", "level": "ERROR", "limit": 10})
        .call("call_logs_config", "query_logs",
              {"service": "config-service", "start": "2026-12-08T15:30:00Z",
               "end": "2026-12-08T16:30:00Z", "contains": "search", "limit": 10})
        .call("call_logs_es", "query_logs",
              {"service": "elasticsearch", "start": "2026-12-08T15:30:00Z",
               "end": "2026-12-08T16:30:00Z", "level": "WARN", "limit": 5},
              evaluation="NO_GAIN")
        .final(draft(
            summary="15:58 config-service 把开关 search.new_ranker 从 5% 放量到 100%"
                    "（CHG-7731），search-api 的 ranker_v2 找不到模型文件 ranker_v2.bin，"
                    "搜索请求全部返回 500。",
            cites=("call_logs_search", "call_logs_config"),
            analysis=[
                finding("search-api 自 15:58:30 起报错 'ranker_v2 failed: model artifact "
                        "ranker_v2.bin not found; returning 500'。", "call_logs_search"),
                finding("config-service 15:58 记录 'flag search.new_ranker rollout changed "
                        "5% -> 100% by alice (change CHG-7731)'。", "call_logs_config"),
                negative("ES 的 yellow 告警从 12:00 起就存在，副本未分配不影响搜索。",
                         "call_logs_es"),
            ],
            actions=["在 config-service 把 search.new_ranker 回退到 5% 或 0%。"],
            recommendations=["放量前确认 ranker_v2.bin 已发布到所有实例。"],
            checked=["search-api ERROR 日志 15:50-16:30 UTC",
                     "config-service 含 search 的日志 15:30-16:30 UTC",
                     "elasticsearch WARN 日志 15:30-16:30 UTC"],
            missing=[],
        ))
    )
    decoy = (
        Script("MUST FAIL: blames the decoy (elasticsearch yellow).")
        .call("call_logs_es", "query_logs",
              {"service": "elasticsearch", "start": "2026-12-08T15:30:00Z",
               "end": "2026-12-08T16:30:00Z", "level": "WARN", "limit": 5})
        .final(draft(
            summary="Elasticsearch 集群状态 yellow（products_v7 有未分配的副本分片），"
                    "导致 search-api 返回 500。",
            cites=("call_logs_es",), confidence="MEDIUM",
            analysis=[finding("elasticsearch 持续告警 cluster health yellow。", "call_logs_es")],
            actions=["重新分配副本分片。"], recommendations=[],
            checked=["elasticsearch WARN 日志 15:30-16:30 UTC"], missing=[],
        ))
    )
    return CaseData(
        case={
            "id": "config-flag-rollout",
            "query": query,
            "asked_at": "2026-12-08T16:30:00Z",
            "expect": {
                "outcome": "DRAFT", "conclusion": "REQUIRED",
                "root_cause_any": ["new_ranker"], "must_not_mention": ["elasticsearch", "yellow"],
                "must_cite_tools": ["query_logs"],
            },
            "note": "Decoy: elasticsearch 'cluster health yellow' warnings since 12:00.",
        },
        logs=logs,
        runbooks=runbooks,
        cassettes={"cassette.json": good, "cassette.fail-blames-decoy.json": decoy},
    )


def disk_retention() -> CaseData:
    """Seen only in logs. Decoy: kafka consumer lag (a consequence, and in the question)."""
    logs = Logs()
    logs.every(
        "ingest-worker", "2026-12-09T04:00:00Z", "2026-12-10T03:12:00Z", 1800, "INFO",
        ["flushed segment seg-{n:05d} (128 MB) to /var/lib/ingest/segments"],
    )
    logs.every(
        "ingest-worker", "2026-12-09T04:00:00Z", "2026-12-10T04:00:00Z", 21600, "INFO",
        ["retention cleaner skipped: retention.enabled=false (config v88)"], offset=120,
    )
    logs.add("ingest-worker", "2026-12-10T02:40:00Z", "WARN", "disk /var/lib/ingest 97% used")
    logs.every(
        "ingest-worker", "2026-12-10T03:12:00Z", "2026-12-10T04:00:00Z", 20, "ERROR",
        ["write segment failed: [Errno 28] No space left on device: "
         "/var/lib/ingest/segments/seg-{n:05d}.tmp"],
    )
    logs.every(
        "ingest-worker", "2026-12-10T03:14:00Z", "2026-12-10T04:00:00Z", 60, "WARN",
        ["kafka consumer lag 4{n:02d}10 messages on topic events (partition 3)"],
    )
    runbooks = {
        "kafka-consumer-lag.en.md": """
# Kafka consumer lag

Growing lag means the consumer is slower than producers: scale consumers, check the broker.
""",
        "ingest-disk.en.md": """
# ingest-worker disk

Segments live on /var/lib/ingest; the retention cleaner deletes segments older than 3 days.
""",
    }
    query = "ingest-worker stopped writing events since about 03:15 UTC and kafka lag keeps " \
            "growing. What happened?"
    good = (
        Script("Competent run: the write errors, then why the disk filled (retention off).")
        .call("call_logs_err", "query_logs",
              {"service": "ingest-worker", "start": "2026-12-10T03:00:00Z",
               "end": "2026-12-10T03:40:00Z", "level": "ERROR", "limit": 5})
        .call("call_logs_retention", "query_logs",
              {"service": "ingest-worker", "start": "2026-12-09T03:40:00Z",
               "end": "2026-12-10T03:40:00Z", "contains": "retention", "limit": 5})
        .final(draft(
            summary="ingest-worker's disk /var/lib/ingest is full: since 03:12 UTC every segment "
                    "write fails with 'No space left on device', because the retention cleaner "
                    "is disabled (retention.enabled=false, config v88). The growing consumer "
                    "lag is a consequence.",
            cites=("call_logs_err", "call_logs_retention"),
            analysis=[
                finding("Since 03:12 UTC: 'write segment failed: [Errno 28] No space left on "
                        "device'.", "call_logs_err"),
                finding("Every run of the retention cleaner in the last 24 h was skipped: "
                        "retention.enabled=false (config v88).", "call_logs_retention"),
            ],
            actions=["Free space on /var/lib/ingest by deleting segments older than 3 days.",
                     "Re-enable retention (retention.enabled=true) and restart ingest-worker."],
            recommendations=["Alert on disk usage above 85%."],
            checked=["ingest-worker ERROR logs 03:00-03:40 UTC",
                     "ingest-worker 'retention' lines in the last 24 h"],
            missing=["Disk metrics were not available."],
        ))
    )
    return CaseData(
        case={
            "id": "disk-retention",
            "query": query,
            "asked_at": "2026-12-10T03:40:00Z",
            "expect": {
                "outcome": "DRAFT", "conclusion": "REQUIRED",
                "root_cause_any": ["no space", "disk"], "root_cause_all": ["retention"],
                "must_not_mention": ["kafka"], "must_cite_tools": ["query_logs"],
            },
            "note": "Decoy: kafka consumer lag, named in the question, a consequence.",
        },
        logs=logs,
        runbooks=runbooks,
        cassettes={"cassette.json": good},
    )
