CREATE TABLE deployments (
  id INT PRIMARY KEY AUTO_INCREMENT,
  service VARCHAR(64) NOT NULL,
  version VARCHAR(32) NOT NULL,
  deployed_at DATETIME NOT NULL,
  change_summary VARCHAR(255) NOT NULL
);
CREATE TABLE batch_jobs (
  id INT PRIMARY KEY AUTO_INCREMENT,
  job VARCHAR(64) NOT NULL,
  started_at DATETIME NOT NULL,
  finished_at DATETIME NULL,
  status VARCHAR(16) NOT NULL,
  note VARCHAR(255) NOT NULL
);
CREATE TABLE lock_wait_snapshots (
  id INT PRIMARY KEY AUTO_INCREMENT,
  captured_at DATETIME NOT NULL,
  waiting_query VARCHAR(255) NOT NULL,
  blocking_job VARCHAR(64) NOT NULL,
  blocking_query VARCHAR(255) NOT NULL,
  wait_seconds INT NOT NULL
);
INSERT INTO deployments (service, version, deployed_at, change_summary) VALUES
('inventory-service', 'v5.4.1', '2026-12-12 11:00:00', 'add sku search endpoint');
INSERT INTO batch_jobs (job, started_at, finished_at, status, note) VALUES
('stock-reconcile', '2026-12-11 02:00:00', '2026-12-11 02:41:00', 'DONE', 'nightly run'),
('stock-reconcile', '2026-12-12 11:28:00', NULL, 'RUNNING', 'schedule moved to 11:28 by OPS-2291'),
('price-sync', '2026-12-12 06:00:00', '2026-12-12 06:04:00', 'DONE', 'daily');
INSERT INTO lock_wait_snapshots (captured_at, waiting_query, blocking_job, blocking_query, wait_seconds) VALUES
('2026-12-12 11:30:00', 'UPDATE stock SET qty = qty - 1 WHERE sku = ?', 'stock-reconcile', 'UPDATE stock SET qty = ? WHERE warehouse_id = 3', 40),
('2026-12-12 11:31:00', 'UPDATE stock SET qty = qty - 1 WHERE sku = ?', 'stock-reconcile', 'UPDATE stock SET qty = ? WHERE warehouse_id = 3', 41),
('2026-12-12 11:32:00', 'UPDATE stock SET qty = qty - 1 WHERE sku = ?', 'stock-reconcile', 'UPDATE stock SET qty = ? WHERE warehouse_id = 3', 42),
('2026-12-12 11:33:00', 'UPDATE stock SET qty = qty - 1 WHERE sku = ?', 'stock-reconcile', 'UPDATE stock SET qty = ? WHERE warehouse_id = 3', 43),
('2026-12-12 11:34:00', 'UPDATE stock SET qty = qty - 1 WHERE sku = ?', 'stock-reconcile', 'UPDATE stock SET qty = ? WHERE warehouse_id = 3', 44),
('2026-12-12 11:35:00', 'UPDATE stock SET qty = qty - 1 WHERE sku = ?', 'stock-reconcile', 'UPDATE stock SET qty = ? WHERE warehouse_id = 3', 45),
('2026-12-12 11:36:00', 'UPDATE stock SET qty = qty - 1 WHERE sku = ?', 'stock-reconcile', 'UPDATE stock SET qty = ? WHERE warehouse_id = 3', 46),
('2026-12-12 11:37:00', 'UPDATE stock SET qty = qty - 1 WHERE sku = ?', 'stock-reconcile', 'UPDATE stock SET qty = ? WHERE warehouse_id = 3', 47),
('2026-12-12 11:38:00', 'UPDATE stock SET qty = qty - 1 WHERE sku = ?', 'stock-reconcile', 'UPDATE stock SET qty = ? WHERE warehouse_id = 3', 48),
('2026-12-12 11:39:00', 'UPDATE stock SET qty = qty - 1 WHERE sku = ?', 'stock-reconcile', 'UPDATE stock SET qty = ? WHERE warehouse_id = 3', 49),
('2026-12-12 11:40:00', 'UPDATE stock SET qty = qty - 1 WHERE sku = ?', 'stock-reconcile', 'UPDATE stock SET qty = ? WHERE warehouse_id = 3', 50),
('2026-12-12 11:41:00', 'UPDATE stock SET qty = qty - 1 WHERE sku = ?', 'stock-reconcile', 'UPDATE stock SET qty = ? WHERE warehouse_id = 3', 51),
('2026-12-12 11:42:00', 'UPDATE stock SET qty = qty - 1 WHERE sku = ?', 'stock-reconcile', 'UPDATE stock SET qty = ? WHERE warehouse_id = 3', 52),
('2026-12-12 11:43:00', 'UPDATE stock SET qty = qty - 1 WHERE sku = ?', 'stock-reconcile', 'UPDATE stock SET qty = ? WHERE warehouse_id = 3', 53),
('2026-12-12 11:44:00', 'UPDATE stock SET qty = qty - 1 WHERE sku = ?', 'stock-reconcile', 'UPDATE stock SET qty = ? WHERE warehouse_id = 3', 54);
