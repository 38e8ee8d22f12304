package kubernetes

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/cloudtransit/transit/bundle"
	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/shellquote"
)

// The bundle is a few hundred megabytes. Sent from the operator's machine
// to every node, it crosses the operator's uplink once per node; so each
// district gets it once: the first node of the district that lacks files
// (its seed) gets the whole bundle from the operator, the others fetch
// what they lack from the seed over the district's own network (the
// mesh on the mesh, else the private addresses), each file checked
// against the manifest's SHA-256,
// and get from the operator only what the fetch missed. A node joined
// before this run serves as the seed too (it has at least its own role's
// files). Nodes of a district fetch only from their district: another's
// is across the internet, as the operator is.
//
// TRANSIT_BUNDLE_PEERS=off sends every node everything from the operator
// (to measure, or where a district's nodes cannot reach each other).

// districtSeed is a district's node that holds the bundle, and where it
// serves it.
type districtSeed struct {
	// busy is closed when the node getting the bundle from the operator
	// (to become the seed) is done; nil when none is.
	busy chan struct{}
	node *districts.Node
	// serve orders the start of the seed's server; addr is where it
	// listens once started, failed that it could not start.
	serve  sync.Mutex
	addr   string
	failed bool
}

// peersOff says the operator sends every node all of its files.
func peersOff() bool { return os.Getenv("TRANSIT_BUNDLE_PEERS") == "off" }

// seedFor returns the seed n fetches from (nil: none, the operator sends
// everything), or mine: n is to become the district's seed, and must call
// seeded when its upload ended. A node joined before this run in n's
// district is taken as the seed when there is none.
func (d *driver) seedFor(ctx context.Context, n districts.Node) (seed *districtSeed, mine bool, err error) {
	for {
		d.mu.Lock()
		s := d.seeds[n.District]
		if s == nil {
			s = &districtSeed{}
			for _, m := range d.nodes {
				if m.District == n.District && m.ID != n.ID && m.Phase == districts.PhaseJoined && shareAddress(m) != "" {
					s.node = &m
					break
				}
			}
			d.seeds[n.District] = s
		}
		switch {
		case s.node != nil && s.node.ID != n.ID && !s.failed:
			d.mu.Unlock()
			return s, false, nil
		case s.busy != nil:
			busy := s.busy
			d.mu.Unlock()
			select {
			case <-busy:
				continue
			case <-ctx.Done():
				return nil, false, ctx.Err()
			}
		case s.failed:
			d.mu.Unlock()
			return nil, false, nil
		}
		s.busy = make(chan struct{})
		d.mu.Unlock()
		return s, true, nil
	}
}

// seeded ends n's turn as the district's seed: with ok it holds the whole
// bundle and serves it; without, the next node waiting takes the turn.
func (d *driver) seeded(n districts.Node, ok bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.seeds[n.District]
	close(s.busy)
	s.busy = nil
	if ok {
		s.node = &n
	}
}

// shareAddress is where a seed serves: its mesh address on the mesh
// (whose firewall lets nothing else in; the loop starts a node's end of
// the mesh before its install), else its address on the district's
// network.
func shareAddress(n districts.Node) string {
	return cmp.Or(n.MeshIP, n.PrivateIP, n.PublicIP)
}

// serving starts the seed's server, once, and returns where it listens;
// "" when it cannot (the files then come from the operator).
func (d *driver) serving(ctx context.Context, s *districtSeed, m *bundle.Manifest) string {
	s.serve.Lock()
	defer s.serve.Unlock()
	if s.addr != "" || s.failed {
		return s.addr
	}
	var req strings.Builder
	req.WriteString(d.shareToken + "\n")
	for _, f := range m.Files {
		req.WriteString(nodePath(f.Path) + "\n")
	}
	for _, im := range m.Images {
		req.WriteString(nodePath(im.Path) + "\n")
	}
	out, err := d.r.Run(ctx, *s.node, "serve the bundle to the district", shareScript(shareAddress(*s.node)), []byte(req.String()))
	addr, ok := strings.CutPrefix(strings.TrimSpace(out), "listening ")
	if _, _, serr := net.SplitHostPort(addr); err != nil || !ok || serr != nil {
		d.opts.Logger.Warn("bundle: the district's seed does not serve it; the operator sends the files", "district", s.node.District, "seed", s.node.ID, "error", err, "answer", strings.TrimSpace(out))
		d.mu.Lock()
		s.failed = true
		d.mu.Unlock()
		return ""
	}
	s.addr = addr
	return addr
}

// shareScript starts transit-mesh share on the seed in the background
// (it ends by itself once idle) and prints where it listens. stdin: the
// token, then the paths offered.
func shareScript(host string) string {
	return `set -eu
` + shPath + `
mkdir -p /run/transit ` + logDir + `
req=$(mktemp /run/transit/share.XXXXXX)
cat > "$req"
setsid transit-mesh share -listen ` + shellquote.Quote(net.JoinHostPort(host, "0")) + ` < "$req" > "$req.out" 2>> ` + logDir + `/share.log &
i=0
until grep -q '^listening ' "$req.out" 2>/dev/null || [ $i -ge 100 ]; do sleep 0.1; i=$((i+1)); done
rm -f "$req"
grep '^listening ' "$req.out" || { echo "transit-mesh share did not start: $(tail -n 3 ` + logDir + `/share.log 2>/dev/null)" >&2; rm -f "$req.out"; exit 1; }
rm -f "$req.out"
`
}

// fetchFromSeed has n fetch files from the seed listening at addr and
// returns those it did not get (the operator sends them).
func (d *driver) fetchFromSeed(ctx context.Context, n districts.Node, seed districts.Node, addr string, files []bundle.File) []bundle.File {
	host, port, _ := net.SplitHostPort(addr)
	files = meshFirst(files)
	var req strings.Builder
	fmt.Fprintf(&req, "%s %s %s\n", host, port, d.shareToken)
	for _, f := range files {
		fmt.Fprintf(&req, "%s %s %o\n", nodePath(f.Path), f.SHA256, f.Mode.Perm())
	}
	out, err := d.r.Run(ctx, n, "fetch the bundle from "+seed.ID, fetchScript, []byte(req.String()))
	got := map[string]bool{}
	var notes []string
	for _, line := range strings.Split(out, "\n") {
		if p, ok := strings.CutPrefix(line, "fetched "); ok {
			got[p] = true
		}
		if note, ok := strings.CutPrefix(line, "note: "); ok {
			notes = append(notes, note)
		}
	}
	var left []bundle.File
	for _, f := range files {
		if !got[nodePath(f.Path)] {
			left = append(left, f)
		}
	}
	if err != nil || len(left) > 0 {
		d.opts.Logger.Warn("bundle: files not fetched from the district's seed; the operator sends them", "node", n.ID, "seed", seed.ID, "missed", len(left), "of", len(files), "why", strings.Join(notes, "; "), "error", err)
	}
	return left
}

// meshFirst is files with the bundle's transit-mesh first: the fetch
// checks the files after it with it.
func meshFirst(files []bundle.File) []bundle.File {
	out := slices.Clone(files)
	rank := func(f bundle.File) int {
		if f.Path == meshBinary {
			return 0
		}
		return 1
	}
	slices.SortStableFunc(out, func(a, b bundle.File) int { return cmp.Compare(rank(a), rank(b)) })
	return out
}

// fetchScript fetches each file of stdin ("DEST SHA256 MODE" lines after
// "HOST PORT TOKEN") from the seed with bash's /dev/tcp (nothing to
// install), keeps it only if its digest is the manifest's, and prints
// "fetched DEST" for each it got. The digest is transit-mesh's where the
// node has one that hashes (fetched first: fetchFromSeed puts it first),
// else sha256sum's: the same bytes, four to five times less CPU. It gives
// up after two failures (bytes that are not the file's), and at once when
// the seed does not answer within 5 s; a file the seed does not have
// (nothing comes) is no failure.
var fetchScript = `set -u
` + shPath + `
command -v bash >/dev/null 2>&1 || { echo "note: no bash on the node"; exit 0; }
exec bash -c ` + shellquote.Quote(fetchBash) + `
`

const fetchBash = `set -u
read -r host port token
timeout 5 bash -c 'exec 3<>"/dev/tcp/$1/$2"' _ "$host" "$port" </dev/null 2>/dev/null || { echo "note: the seed $host:$port does not answer within 5 s"; exit 0; }
digest() { d=$(transit-mesh sha256 "$1" 2>/dev/null) || d=$(sha256sum "$1"); echo "${d%% *}"; }
failures=0
while read -r dest sha mode; do
	[ $failures -lt 2 ] || continue
	mkdir -p "$(dirname "$dest")"
	part="$dest.transit-part"
	timeout 600 bash -c 'exec 3<>"/dev/tcp/$1/$2" && printf "%s %s\n" "$3" "$4" >&3 && cat <&3' _ "$host" "$port" "$token" "$dest" </dev/null >"$part" 2>/dev/null
	if [ "$(digest "$part")" = "$sha" ] && chmod "$mode" "$part" && mv -f "$part" "$dest"; then
		echo "fetched $dest"
	elif [ -s "$part" ]; then
		failures=$((failures+1)) # cut short or other bytes
		echo "note: $dest came with other bytes than the manifest's"
	fi
	rm -f "$part" # nothing: the seed lacks it (a worker has no master's images)
done
exit 0`

// newShareToken is a run's token for its seeds' servers.
func newShareToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
