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
INSERT INTO deployments (service, version, deployed_at, change_summary) VALUES
('web-frontend', 'v3.2.0', '2026-12-03 14:00:00', 'new checkout page layout'),
('order-service', 'v4.7.1', '2026-12-01 09:12:00', 'pagination fix');
INSERT INTO schema_migrations (version, description, applied_at) VALUES
('20261128_0930', 'add column orders.gift_note', '2026-11-28 09:30:00'),
('20261203_1405', 'drop index idx_orders_customer_created on orders (cleanup)', '2026-12-03 14:05:00');
