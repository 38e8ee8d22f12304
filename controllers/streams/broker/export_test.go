package broker

import "time"

// DelayKeepalive makes each keepalive's first heartbeat come d late, as
// on a loaded machine; call it before any member joins.
func DelayKeepalive(b *Broker, d time.Duration) { b.keepalive.firstBeat = d }

// ForgetEmptyGroups runs the keepalive's periodic forgetting now.
func ForgetEmptyGroups(b *Broker) { b.keepalive.forgetEmptyGroups() }

// Remembered is how many groups the keepalive remembers joins or
// assignments of.
func Remembered(b *Broker) int {
	k := b.keepalive
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.remembered())
}
