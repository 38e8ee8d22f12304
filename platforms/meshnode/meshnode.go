// Package meshnode is the node side of transit's node mesh, shared by
// the platform drivers that run on it (Kubernetes and Swarm): where
// transit keeps its files on a node, the scripts that start transit-mesh
// (package mesh, cmd/transit-mesh: the kernel's WireGuard, or wireguard-go
// on a TUN device where the kernel has none)
// and give it its peers, and the reading of the node's answer. How the
// binary reaches the node is each driver's own (the Kubernetes bundle,
// or a binary on the machine transit runs on).
//
// The scripts are built by pure functions and run under `sh -s` as root
// on a node.
package meshnode

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/cloudtransit/transit/districts"
	"github.com/cloudtransit/transit/provider"
	"github.com/cloudtransit/transit/shellquote"
)

// Where transit keeps what it puts on a node.
const (
	// BinDir holds the binaries transit sends (the Kubernetes bundle's,
	// transit-mesh) and its helpers (transit-supervise).
	BinDir = "/opt/transit/bin"
	// LogDir keeps the logs of the daemons transit supervises.
	LogDir = "/var/lib/transit/log"
	// Binary is transit-mesh on a node.
	Binary = BinDir + "/transit-mesh"
	// Dir keeps the node's mesh key pair (0600: the private key never
	// leaves it), its address and its peers.
	Dir = "/var/lib/transit/mesh"
	// Interface is the mesh's device on every node.
	Interface = "transit0"
)

// ShPath puts transit's binaries first.
const ShPath = "export PATH=" + BinDir + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// SuperviseScript is transit-supervise, the stand-in for systemd on nodes
// without it (local nodes): it runs a command again a second after it
// exits, as Restart=always does, logging to LogDir.
const SuperviseScript = `#!/bin/sh
# transit-supervise NAME COMMAND...: restart COMMAND whenever it exits.
name=$1; shift
while :; do
	echo "transit-supervise: starting $*" >>"` + LogDir + `/$name.log"
	"$@" >>"` + LogDir + `/$name.log" 2>&1 </dev/null
	sleep 1
done
`

// Unit is a systemd unit for a daemon transit runs on a node with
// systemd.
func Unit(desc, exec string) string {
	return "[Unit]\nDescription=" + desc + " (transit)\nAfter=network-online.target\n\n[Service]\nExecStart=" + exec +
		"\nRestart=always\nRestartSec=1\nDelegate=yes\nKillMode=process\nLimitNOFILE=1048576\n\n[Install]\nWantedBy=multi-user.target\n"
}

// ensureSupervise writes transit-supervise unless the node has it as it
// should be (a Kubernetes node from the bundle has it already; a Swarm
// node gets it here). A new file replaces the old one whole: a running
// supervisor keeps reading the one it started with.
var ensureSupervise = `	sup=` + shellquote.Quote(SuperviseScript) + `
	if [ "$(cat ` + BinDir + `/transit-supervise 2>/dev/null)" != "$(printf '%s' "$sup")" ]; then
		mkdir -p ` + BinDir + `
		printf '%s' "$sup" > ` + BinDir + `/transit-supervise.new
		chmod 755 ` + BinDir + `/transit-supervise.new
		mv ` + BinDir + `/transit-supervise.new ` + BinDir + `/transit-supervise
	fi
`

// UpScript starts the node's end of the mesh at spec's address, unless
// the node has one already (kept in Dir/address): that one stays. With no
// address in spec it only reports ("none" when the node has no mesh). It
// runs transit-mesh (at Binary, in place before) as a systemd unit, or
// under transit-supervise on a node without systemd, and waits until the
// interface holds the address; then it prints the node's public key and
// address (ParseEnd).
func UpScript(spec provider.MeshSpec) string {
	port := strconv.Itoa(spec.Port)
	run := func(addr string) string {
		return Binary + " up -dir " + Dir + " -interface " + Interface + " -address " + addr + " -port " + port
	}
	return `set -eu
` + ShPath + `
want=` + shellquote.Quote(spec.Address) + `
if [ -f ` + Dir + `/address ]; then
	addr=$(cat ` + Dir + `/address)
elif [ -z "$want" ]; then
	echo none
	exit 0
else
	mkdir -p -m 700 ` + Dir + ` ` + LogDir + ` /run/transit
	printf '%s\n' "$want" > ` + Dir + `/address.new
	mv ` + Dir + `/address.new ` + Dir + `/address
	addr=$want
fi
key=$(transit-mesh key -dir ` + Dir + `)
if [ -d /run/systemd/system ]; then
	unit=$(printf '%s' ` + shellquote.Quote(Unit("WireGuard mesh", run("ADDR"))) + ` | sed "s|ADDR|$addr|")
	if [ "$(cat /etc/systemd/system/transit-mesh.service 2>/dev/null)" != "$unit" ]; then
		printf '%s' "$unit" > /etc/systemd/system/transit-mesh.service
		systemctl daemon-reload
	fi
	systemctl enable transit-mesh >/dev/null 2>&1
	systemctl start transit-mesh
else
	mkdir -p ` + LogDir + ` /run/transit
` + ensureSupervise + `	pid=$(cat /run/transit/transit-mesh.pid 2>/dev/null || true)
	if [ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null; then
		setsid ` + BinDir + `/transit-supervise transit-mesh ` + run(`"$addr"`) + ` </dev/null >/dev/null 2>&1 &
		echo $! > /run/transit/transit-mesh.pid
	fi
fi
i=0
until ip -o addr show dev ` + Interface + ` 2>/dev/null | grep -q " ${addr%/*}/"; do
	i=$((i+1))
	if [ $i -gt 100 ]; then
		echo "the mesh did not come up at $addr (see ` + LogDir + `/transit-mesh.log or journalctl -u transit-mesh):" >&2
		tail -n 5 ` + LogDir + `/transit-mesh.log >&2 2>/dev/null || true
		exit 1
	fi
	sleep 0.1
done
echo "key=$key"
echo "address=$addr"
`
}

// ParseEnd reads UpScript's answer from node n: "key=… address=…" lines,
// or "none" from a node asked only.
func ParseEnd(n districts.Node, out string) (provider.MeshEnd, error) {
	var end provider.MeshEnd
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), "=")
		switch k {
		case "key":
			end.PublicKey = v
		case "address":
			end.Address, _, _ = strings.Cut(v, "/")
		case "none":
			return provider.MeshEnd{}, nil
		}
	}
	if end.PublicKey == "" || end.Address == "" {
		return end, fmt.Errorf("node %s: the mesh did not say its key and address (it printed %q)", n.ID, strings.TrimSpace(out))
	}
	return end, nil
}

// Peers is PeersScript's stdin: peers as the JSON list transit-mesh
// reads, empty (never null) when the node has none.
func Peers(peers []provider.MeshPeer) ([]byte, error) {
	if peers == nil {
		peers = []provider.MeshPeer{}
	}
	return json.Marshal(peers)
}

// PeersScript replaces the node's peers with the JSON list of
// provider.MeshPeer on its stdin (transit-mesh checks them first) and
// wakes the device, which reads them at once.
const PeersScript = `set -eu
` + ShPath + `
transit-mesh peers -dir ` + Dir + `
pkill -HUP -x transit-mesh 2>/dev/null || true
`

// RotateScript changes the node's mesh key, each step idempotent (the
// binary at Binary must know transit-mesh rotate). With commit empty it
// makes the node's next key, or finds the one made before, and prints
// the key and the next one. With commit, the next key's public half, it
// makes that the node's key, wakes the device and waits until the device
// runs with it (Dir/running.key): a device that does not take it within
// 3 s is an older transit-mesh, which reads its key only when it starts,
// and is restarted. Then it prints the key. ParseKeys reads its answer.
func RotateScript(commit string) string {
	if commit == "" {
		return `set -eu
` + ShPath + `
transit-mesh rotate -dir ` + Dir + `
`
	}
	return `set -eu
` + ShPath + `
pub=` + shellquote.Quote(commit) + `
transit-mesh rotate -dir ` + Dir + ` -commit "$pub" >/dev/null
pkill -HUP -x transit-mesh 2>/dev/null || true
i=0
until [ "$(cat ` + Dir + `/running.key 2>/dev/null)" = "$pub" ]; do
	i=$((i+1))
	if [ $i -eq 30 ]; then
		if [ -d /run/systemd/system ]; then
			systemctl restart transit-mesh
		else
			pid=$(cat /run/transit/transit-mesh.pid 2>/dev/null || true)
			if [ -n "$pid" ]; then pkill -TERM -x -P "$pid" transit-mesh 2>/dev/null || true; fi
		fi
	fi
	if [ $i -gt 100 ]; then
		echo "the mesh did not take its new key $pub (see ` + LogDir + `/transit-mesh.log or journalctl -u transit-mesh):" >&2
		tail -n 5 ` + LogDir + `/transit-mesh.log >&2 2>/dev/null || true
		exit 1
	fi
	sleep 0.1
done
echo "key=$pub"
`
}

// ParseKeys reads RotateScript's answer from node n: "key=…" and, before
// the commit, "next=…" lines.
func ParseKeys(n districts.Node, out string) (provider.MeshKeys, error) {
	var keys provider.MeshKeys
	for line := range strings.Lines(strings.TrimSpace(out)) {
		k, v, _ := strings.Cut(strings.TrimSpace(line), "=")
		switch k {
		case "key":
			keys.Current = v
		case "next":
			keys.Next = v
		}
	}
	if keys.Current == "" {
		return keys, fmt.Errorf("node %s: the mesh did not say its key (it printed %q)", n.ID, strings.TrimSpace(out))
	}
	return keys, nil
}
