-- Egress flows (issue 25): every drop is on the record. An egress event
-- now says the transport protocol (tcp, udp, icmp, icmpv6, or another IP
-- protocol) and the destination address the guest dialled, beside the
-- name it claimed. Rows from before have neither ('').

-- +goose Up
ALTER TABLE egress_events ADD COLUMN proto TEXT NOT NULL DEFAULT '';
ALTER TABLE egress_events ADD COLUMN addr TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE egress_events DROP COLUMN addr;
ALTER TABLE egress_events DROP COLUMN proto;
