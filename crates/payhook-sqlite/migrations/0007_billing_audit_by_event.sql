-- An event's detail lists the subscription and entitlement changes it made: billing_audit is keyed by the object it
-- changed, so finding them by event needs this index. Only billing events write it.
CREATE INDEX billing_audit_event ON billing_audit (source, event_id);
