// Package ssh reaches the machines transit launched over SSH, to install
// software and run the container platform's commands on them.
//
// # Keys
//
// Each cluster has one SSH identity, an ed25519 key that EnsureKey creates
// on first use in the state directory:
//
//	transit-<cluster>.key      OpenSSH private key, mode 0600
//	transit-<cluster>.key.pub  authorized_keys line "ssh-ed25519 AAAA... transit-<cluster>"
//
// Machines are launched with the public key in root's authorized_keys. A
// private key file readable by group or others is refused.
//
// # Host keys
//
// A machine's host key is pinned before transit first connects when its
// provider reports it (provider.Instance.HostKeys; PinHostKeys wraps a
// driver to pin at Launch and List, and to forget at Terminate). A
// machine whose provider cannot say has the first key it presents pinned
// (trust on first use). Later connections accept only the pinned key and
// fail with *HostKeyChangedError otherwise. Pins are keyed by the
// machine's provider id, not its address, because clouds hand addresses to
// new machines. They live in transit-<cluster>.known_hosts (mode 0600), one
// line per machine:
//
//	# comments and blank lines are kept
//	i-0abc123 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAA...
//
// The file is rewritten atomically under a flock of
// transit-<cluster>.known_hosts.lock, after re-reading it, so concurrent
// transit processes keep each other's pins; waiting for that lock ends
// with the caller's context. Checking a pinned key takes no lock and
// re-reads the file only when it changed. Deleting a line forgets a pin.
//
// # Running commands
//
// Dial waits for a booting machine's sshd, and for a refused key while the
// machine is within Config.AuthWindow of its launch (cloud-init may
// install the key after sshd starts); it fails at once when the host key
// changed, or the key is refused later. Client.Run sends a sh script to `sh -s`
// on stdin and returns its stdout, or a *RunError carrying the exit status
// and both output streams. Cancelling its context, or losing the
// connection, kills the remote command: a watcher in the script's wrapper
// kills the process group when the session's stdin closes (OpenSSH ignores
// signal requests for root logins). Client.UploadFrom streams a file of a
// known size to the node and renames it into place atomically, over one
// `sh -c` command, without sftp; content ending early leaves the old file.
// Client.DialContext opens a TCP connection from the node (a direct-tcpip
// channel), to reach services that listen on a node's loopback, such as a
// master's API server or etcd; the connection has the deadlines net/http
// and gRPC expect.
//
// # Pool
//
// A platform driver reaches its nodes through a Pool: one connection per
// node (NodeTarget says how it is dialed), reused for the whole run and
// shared by concurrent callers, at most 8 sessions at once on each. Nodes
// that answered before get short dial waits; a reused connection found
// broken is dropped and the call runs once more on a new one when nothing
// of it reached the node. Pool.Run passes secrets on a script's stdin,
// never in a command line.
package ssh
