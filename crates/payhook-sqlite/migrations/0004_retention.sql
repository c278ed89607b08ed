-- Retention: settled events are pruned by age. Rows are appended in time order, so this index grows at its right
-- edge (one hot page), not at random places.
ALTER TABLE inbox ADD COLUMN pruned_at INTEGER;   -- unix ms when the body and headers were cleared
CREATE INDEX inbox_received ON inbox (received_at);
