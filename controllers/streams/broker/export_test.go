package broker

import "time"

// DelayKeepalive makes each keepalive's first heartbeat come d late, as
// on a loaded machine; call it before any member joins.
func DelayKeepalive(b *Broker, d time.Duration) { b.keepalive.firstBeat = d }
