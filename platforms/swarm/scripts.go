package swarm

import (
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/cloudtransit/transit/shellquote"
)

// The remote scripts, built by pure functions so they are tested as strings.
// Each runs under `sh -s` as root on a node. Every value that comes from
// outside transit is quoted with shellquote.Quote.

// imagesDir is where a machine image may carry container images to preload
// (the local provider bind-mounts its images directory there): nodes need
// no registry.
const imagesDir = "/var/lib/transit/images"

// aptLockWait is how many seconds apt-get waits for the package manager's
// lock.
const aptLockWait = "600"

// installScript ensures a running Docker engine and curl (joinScript needs
// it). Where dockerd is missing it
// installs the distribution's package; where systemd runs it starts the
// service; where no init system runs (a local node, whose init is sshd) it
// starts dockerd itself with the default paths. The choice follows what the
// machine has, not which provider made it. It then loads the image archives
// found in imagesDir, once each. An engine it starts on a machine that
// carries images (a local node, which has no registry) runs swarm tasks
// from its own images without asking a registry first
// (DOCKER_SERVICE_PREFER_OFFLINE_IMAGE, as moby's own tests run it):
// asked, an unreachable registry held every new task in Preparing until
// its DNS lookups timed out, 20 s here. First it names the machine after its
// transit node (hostname and /etc/hostname, and /etc/hosts so the name
// resolves): a cloud names machines its own way, and the swarm then knows
// the node by its transit id even if the identity label a join sets were
// lost.
func installScript(nodeID string) string {
	id := shellquote.Quote(nodeID)
	return `set -eu
if [ "$(hostname)" != ` + id + ` ]; then
	hostname ` + id + `
	if [ -w /etc/hostname ]; then echo ` + id + ` >/etc/hostname; fi
fi
if [ -w /etc/hosts ] && ! grep -q "[[:space:]]"` + id + `"\$" /etc/hosts; then
	printf '127.0.1.1\t%s\n' ` + id + ` >>/etc/hosts
fi
missing=
command -v dockerd >/dev/null 2>&1 || missing=docker
command -v curl >/dev/null 2>&1 || missing="$missing curl"
if [ -n "$missing" ]; then
	if command -v apt-get >/dev/null 2>&1; then
		export DEBIAN_FRONTEND=noninteractive
		# On first boot cloud-init or unattended-upgrades may hold the
		# package manager's lock for minutes: wait for it, not fail.
		apt-get -o DPkg::Lock::Timeout=` + aptLockWait + ` update -q >/dev/null
		pkgs=
		case "$missing" in *docker*) pkgs=docker.io ;; esac
		case "$missing" in *curl*) pkgs="$pkgs curl" ;; esac
		apt-get -o DPkg::Lock::Timeout=` + aptLockWait + ` install -y -q $pkgs >/dev/null
	elif command -v dnf >/dev/null 2>&1; then
		dnf install -y -q docker curl
	elif command -v yum >/dev/null 2>&1; then
		yum install -y -q docker curl
	else
		echo "missing:$missing; and no apt-get, dnf or yum to install it" >&2
		exit 3
	fi
fi
if ! docker info >/dev/null 2>&1; then
	mkdir -p /run/transit
	if [ -d /run/systemd/system ]; then
		systemctl enable --now docker >/dev/null
	elif ! { [ -s /run/transit/dockerd.pid ] && kill -0 "$(cat /run/transit/dockerd.pid)" 2>/dev/null; }; then
		# No init system: run the engine detached, with its default paths.
		if [ -d ` + imagesDir + ` ]; then export DOCKER_SERVICE_PREFER_OFFLINE_IMAGE=1; fi
		setsid dockerd --pidfile /run/transit/dockerd.pid >>/run/transit/dockerd.log 2>&1 </dev/null &
	fi
	i=0
	until docker info >/dev/null 2>&1; do
		i=$((i + 1))
		if [ "$i" -ge 600 ]; then
			echo "the docker engine did not answer within 60s" >&2
			tail -n 20 /run/transit/dockerd.log >&2 2>/dev/null || true
			exit 1
		fi
		sleep 0.1
	done
fi
if [ -d ` + imagesDir + ` ]; then
	mkdir -p /var/lib/transit/images-loaded
	for f in ` + imagesDir + `/*.tar; do
		[ -e "$f" ] || continue
		mark=/var/lib/transit/images-loaded/$(basename "$f")
		if [ -e "$mark" ] && [ ! "$f" -nt "$mark" ]; then
			continue
		fi
		docker load -i "$f" >/dev/null
		touch "$mark"
	done
fi
`
}

// localStateScript prints the node's swarm state: "none" when it is in no
// swarm (or has no engine yet), "down" when its engine is not running but
// it belongs to a swarm, else "<state> <control available> <node id>"
// (state is docker's LocalNodeState: inactive, pending, active, error or
// locked).
func localStateScript() string {
	return `set -eu
if ! command -v docker >/dev/null 2>&1; then
	echo none
	exit 0
fi
if ! docker info >/dev/null 2>&1; then
	if [ -e /var/lib/docker/swarm/docker-state.json ]; then echo down; else echo none; fi
	exit 0
fi
state=$(docker info --format '{{.Swarm.LocalNodeState}} {{.Swarm.ControlAvailable}} {{.Swarm.NodeID}}')
echo "$state"
`
}

// membersScript prints what localStateScript prints and, on an active
// manager, every swarm node as `docker node inspect` JSON on the lines
// after: one session per master answers both questions, and the list comes
// from the manager whose state was printed.
func membersScript() string {
	return localStateScript() + `case "$state" in
"active true "*) docker node inspect $(docker node ls -q) ;;
esac
`
}

// inspectScript prints every swarm node as `docker node inspect` JSON; it
// runs on a manager.
func inspectScript() string {
	return `set -eu
docker node inspect $(docker node ls -q)
`
}

// initScript makes the node the first manager of a new swarm (or finds it
// already is one) and prints its swarm node id. It advertises addr; with
// dataPath (the node's mesh address on the node mesh) the overlay
// networks' traffic goes there too, not to Swarm's default (addr, or the
// address of the node's default route).
func initScript(addr, dataPath string) string {
	a := shellquote.Quote(addr)
	dp := ""
	if dataPath != "" {
		dp = " --data-path-addr " + shellquote.Quote(dataPath)
	}
	return `set -eu
state=$(docker info --format '{{.Swarm.LocalNodeState}}')
if [ "$state" = inactive ]; then
	docker swarm init --advertise-addr ` + a + dp + ` --listen-addr ` + listenAddr + ` >/dev/null
elif [ "$(docker info --format '{{.Swarm.ControlAvailable}}')" != true ]; then
	echo "the node is already in a swarm (state $state) but is not a manager" >&2
	exit 3
fi
docker info --format '{{.Swarm.NodeID}}'
`
}

// joinTokenScript prints the join token for role ("manager" or "worker");
// it runs on a manager.
func joinTokenScript(role string) string {
	return "set -eu\ndocker swarm join-token -q " + shellquote.Quote(role) + "\n"
}

// joinRequest is the body of the engine's POST /swarm/join that joins the
// node at addr to the swarm a manager at managerAddr runs; dataPath, when
// not empty, is where the node's overlay traffic goes (its mesh address).
func joinRequest(token, addr, dataPath, managerAddr string) ([]byte, error) {
	return json.Marshal(struct {
		ListenAddr    string
		AdvertiseAddr string
		DataPathAddr  string `json:",omitempty"`
		RemoteAddrs   []string
		JoinToken     string
	}{listenAddr, addr, dataPath, []string{net.JoinHostPort(managerAddr, "2377")}, token})
}

// listenAddr is where a manager listens: every address of the node. The
// advertised address is the one others reach it on, which in a cloud with
// 1:1 NAT (AWS, GCE) is not on any of its interfaces and cannot be bound.
const listenAddr = "0.0.0.0:2377"

// joinScript joins the node to a swarm (unless it is in a swarm already)
// with the joinRequest on its stdin, and prints its swarm node id. docker
// swarm join takes the token only as an argument, which every user of the
// node could read in the process list; the engine's API takes it from
// curl's stdin.
func joinScript() string {
	return `set -eu
state=$(docker info --format '{{.Swarm.LocalNodeState}}')
case "$state" in
pending)
	# An earlier join is still under way; it may make the node a manager,
	# so it is waited for, never forced out.
	echo "the node is still joining a swarm (state pending)" >&2
	exit ` + strconv.Itoa(exitRetry) + `
	;;
locked)
	echo "the node's swarm is locked: unlock it with docker swarm unlock, or remove the node" >&2
	exit 3
	;;
active | inactive) ;;
*)
	# A failed join (state error): leave without --force, so the engine
	# refuses if the node holds a manager's seat after all.
	if ! out=$(docker swarm leave 2>&1 </dev/null); then
		echo "the node is in swarm state $state and cannot leave it without --force: $out" >&2
		exit 3
	fi
	;;
esac
if [ "$state" != active ]; then
	command -v curl >/dev/null 2>&1 || { echo "curl is missing: install the node again" >&2; exit 3; }
	resp=$(mktemp)
	trap 'rm -f "$resp"' EXIT
	code=$(curl -sS -o "$resp" -w '%{http_code}' --unix-socket /var/run/docker.sock \
		-H 'Content-Type: application/json' --data-binary @- http://localhost/swarm/join)
	case "$code" in
	2??) ;;
	*) echo "docker swarm join: the engine answered HTTP $code: $(cat "$resp")" >&2; exit 1 ;;
	esac
fi
docker info --format '{{.Swarm.NodeID}}' </dev/null
`
}

// nodeUpdateScript changes one swarm node's labels, availability or role;
// it runs on a manager. set holds labels to add or change, drop the keys to
// remove; availability and role are left alone when empty.
func nodeUpdateScript(swarmID string, set map[string]string, drop []string, availability, role string) string {
	var b strings.Builder
	b.WriteString("set -eu\n")
	var args []string
	for _, k := range slices.Sorted(maps.Keys(set)) {
		args = append(args, "--label-add", shellquote.Quote(k+"="+set[k]))
	}
	for _, k := range slices.Sorted(slices.Values(drop)) {
		args = append(args, "--label-rm", shellquote.Quote(k))
	}
	if availability != "" {
		args = append(args, "--availability", shellquote.Quote(availability))
	}
	if len(args) > 0 || role != "" {
		b.WriteString(outOfSequence)
	}
	if len(args) > 0 {
		fmt.Fprintf(&b, "in_sequence docker node update %s %s\n", strings.Join(args, " "), shellquote.Quote(swarmID))
	}
	switch role {
	case "manager":
		fmt.Fprintf(&b, "in_sequence docker node promote %s\n", shellquote.Quote(swarmID))
	case "worker":
		fmt.Fprintf(&b, "in_sequence docker node demote %s\n", shellquote.Quote(swarmID))
	}
	return b.String()
}

// outOfSequence defines in_sequence COMMAND...: it runs a node update
// again while the manager answers "update out of sequence". The CLI reads
// the node and writes it back with the version it read; a node that just
// joined changes version as its agent reports in, so a label set right
// after a join loses that race now and then (seen with ten nodes joining
// at once), and a join whose identity label is missing leaves a member
// transit cannot name.
const outOfSequence = `in_sequence() {
	n=0
	until out=$("$@" 2>&1 >/dev/null); do
		case "$out" in
		*"update out of sequence"*)
			n=$((n + 1))
			if [ "$n" -ge 50 ]; then printf '%s\n' "$out" >&2; return 1; fi
			sleep 0.1 ;;
		*) printf '%s\n' "$out" >&2; return 1 ;;
		esac
	done
}
`

// nodeTasksScript prints the tasks on a node, shut down ones included
// (its task history), as "task|<service id>|<task id>|<state>|<desired
// state>" lines, and the services' names as "service|<id>|<name>" lines.
// It runs on a manager.
func nodeTasksScript(swarmID string) string {
	return `set -eu
` + inspectExisting + `ids=$(docker node ps -q ` + shellquote.Quote(swarmID) + `)
[ -n "$ids" ] || exit 0
inspect_existing 'task|{{.ServiceID}}|{{.ID}}|{{.Status.State}}|{{.DesiredState}}' $ids
services=$(docker service ls -q)
[ -n "$services" ] || exit 0
inspect_existing 'service|{{.ID}}|{{.Spec.Name}}' $services
`
}

// inspectExisting defines inspect_existing FORMAT ID...: docker inspect
// that skips objects removed since they were listed (a service removed
// while a drain watches it takes its tasks along); any other error fails.
const inspectExisting = `# docker inspect that skips objects removed since they were listed (a
# service removed meanwhile takes its tasks along); any other error fails.
inspect_existing() {
	fmt=$1
	shift
	if { err=$(docker inspect --format "$fmt" "$@" 2>&1 >&3); } 3>&1; then
		return 0
	fi
	if [ -z "$err" ] || printf '%s\n' "$err" | grep -qv '^Error: No such object: '; then
		printf '%s\n' "$err" >&2
		return 1
	fi
}
`

// serviceTasksScript prints, for each service that still exists, a line
// "service|<id>|<name>|<mode>|<replicas>" (mode replicated, global or job;
// replicas only for replicated) and the tasks the swarm wants running as
// "task|<service id>|<node id>|<state>|<error>" lines. It runs on a
// manager.
func serviceTasksScript(serviceIDs []string) string {
	quoted := make([]string, len(serviceIDs))
	for i, id := range serviceIDs {
		quoted[i] = shellquote.Quote(id)
	}
	return `set -eu
` + inspectExisting + `for s in ` + strings.Join(quoted, " ") + `; do
	docker service inspect --format 'service|{{.ID}}|{{.Spec.Name}}|{{if .Spec.Mode.Replicated}}replicated|{{.Spec.Mode.Replicated.Replicas}}{{else if .Spec.Mode.Global}}global|{{else}}job|{{end}}' "$s" 2>/dev/null || continue
	if ! ids=$(docker service ps -q --filter desired-state=running "$s" 2>&1); then
		case "$ids" in
		*"o such service"*) continue ;; # removed since the inspect
		esac
		printf '%s\n' "$ids" >&2
		exit 1
	fi
	[ -n "$ids" ] || continue
	inspect_existing "task|$s"'|{{.NodeID}}|{{.Status.State}}|{{.Status.Err}}' $ids
done
`
}

// leaveScript takes the node out of its swarm, without --force: the engine
// refuses when leaving would hurt the swarm. A node that still runs as a
// manager (its demotion not through yet) exits with exitRetry; a node in no
// swarm, or whose engine is not running, is fine.
func leaveScript() string {
	return `set -eu
if ! docker info >/dev/null 2>&1; then
	exit 0
fi
state=$(docker info --format '{{.Swarm.LocalNodeState}}')
[ "$state" != inactive ] || exit 0
if [ "$(docker info --format '{{.Swarm.ControlAvailable}}')" = true ]; then
	echo "the node still runs as a swarm manager" >&2
	exit ` + fmt.Sprint(exitRetry) + `
fi
docker swarm leave >/dev/null
`
}

// removeScript deletes a node that left, or could not leave (its machine
// is gone or does not answer), from the swarm's node list at once (--force:
// the managers would list a node that left until its heartbeats time out).
// A node the swarm no longer has is fine. It runs on a manager.
func removeScript(swarmID string) string {
	return `set -eu
if ! out=$(docker node rm --force ` + shellquote.Quote(swarmID) + ` 2>&1 >/dev/null); then
	case "$out" in
	*"node "*" not found"*) ;;
	*) printf '%s\n' "$out" >&2; exit 1 ;;
	esac
fi
`
}

// rotateTokensScript replaces the worker and manager join tokens, printing
// neither. It runs on a manager.
func rotateTokensScript() string {
	return `set -eu
docker swarm join-token --rotate -q worker >/dev/null
docker swarm join-token --rotate -q manager >/dev/null
`
}
