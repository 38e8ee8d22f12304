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
// Machines' host keys are trusted on first use: the first key a machine
// presents is pinned, later connections accept only that key and fail with
// *HostKeyChangedError otherwise. Pins are keyed by the machine's provider
// id, not its address, because clouds hand addresses to new machines. They
// live in transit-<cluster>.known_hosts (mode 0600), one line per machine:
//
//	# comments and blank lines are kept
//	i-0abc123 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAA...
//
// The file is rewritten atomically under a flock of
// transit-<cluster>.known_hosts.lock, after re-reading it, so concurrent
// transit processes keep each other's pins. Deleting a line forgets a pin.
//
// # Running commands
//
// Dial waits for a booting machine's sshd and fails at once when the key is
// refused or the host key changed. Client.Run sends a sh script to `sh -s`
// on stdin and returns its stdout, or a *RunError carrying the exit status
// and both output streams. Cancelling its context, or losing the
// connection, kills the remote command: a watcher in the script's wrapper
// kills the process group when the session's stdin closes (OpenSSH ignores
// signal requests for root logins). Client.Upload writes a file atomically
// over one `sh -c` command, without sftp.
package ssh
