// Package e2e holds transit's end-to-end suites: the real transit binary
// against real local nodes (network namespaces with their own sshd), a real
// Docker Swarm inside them and real host firewall rules. They need root and
// skip under -short; each test removes everything it made, even when it
// fails.
package e2e
