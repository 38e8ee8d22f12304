// Command transit-mesh runs a node's side of transit's encrypted mesh
// (package mesh). transit installs it from the bundle and runs it over
// SSH:
//
//	transit-mesh key -dir DIR                  print the node's public key (making the key pair first)
//	transit-mesh up -dir DIR -address A/LEN    run the device until SIGTERM (SIGHUP: read the peers now)
//	    [-interface transit0] [-port 51820] [-impl auto|kernel|userspace]
//	transit-mesh peers -dir DIR < peers.json   replace the peers (checked first)
//	transit-mesh rotate -dir DIR               print key=PUB and next=PUB: the node's public key and its next one (made if need be)
//	transit-mesh rotate -dir DIR -commit PUB   make the next key (public half PUB) the node's key; print key=PUB
//	transit-mesh share -listen ADDR < request  serve bundle files to the district's other nodes (package bundle/share)
//	transit-mesh sha256 FILE...                print each file's SHA-256 as sha256sum does
//
// up runs the kernel's WireGuard where the kernel has it (-impl auto, the
// default: a link of type wireguard, made with ip link add, or one a
// previous run left, deleted at SIGTERM) and wireguard-go in userspace on
// a TUN device where it does not; it logs which. -impl kernel fails where
// the kernel has no WireGuard (load the module, modprobe wireguard, or
// run -impl userspace); -impl userspace never tries the kernel.
//
// rotate changes the node's key in two steps, each of which can be asked
// again: the next key pair waits beside the key until committed (its
// public half goes to the peers meanwhile); committed, a running up takes
// it within a second (at once on SIGHUP) and writes its public half to
// DIR/running.key.
//
// share reads a token (the first line) and the paths it offers (one per
// line) from stdin, prints "listening HOST:PORT" once it listens, and ends
// after -idle without a request or -max.
//
// sha256 is what a node checks the bundle files it fetches with: Go's
// SHA-256 uses the CPU's SHA instructions, four to five times faster than
// coreutils' sha256sum here (a node fetches ~550 MB).
//
// The private key never leaves DIR (mode 0600) and is never printed.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/cloudtransit/transit/bundle"
	"github.com/cloudtransit/transit/bundle/share"
	"github.com/cloudtransit/transit/mesh"
)

const defaultDir = "/var/lib/transit/mesh"

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "transit-mesh:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("want a command: key, up, peers, rotate, share or sha256")
	}
	if args[0] != "up" {
		// transit gives the mesh its peers with `pkill -HUP -x
		// transit-mesh`, which reaches every transit-mesh of the node: a
		// share serving the bundle, a digest check of a fetched file. Only
		// up listens; SIGHUP must end no other.
		signal.Ignore(syscall.SIGHUP)
	}
	fs := flag.NewFlagSet("transit-mesh "+args[0], flag.ContinueOnError)
	dir := fs.String("dir", defaultDir, "where the key and the peers are")
	switch args[0] {
	case "key":
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		k, err := mesh.LoadOrCreateKey(*dir)
		if err != nil {
			return err
		}
		fmt.Println(k.Public())
		return nil
	case "peers":
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		data, err := io.ReadAll(os.Stdin)
		if err != nil {
			return err
		}
		return mesh.WritePeers(*dir, data)
	case "rotate":
		commit := fs.String("commit", "", "the next key's public half, as rotate printed it: make that key the node's")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		return rotate(*dir, *commit)
	case "up":
		iface := fs.String("interface", "transit0", "the device's name")
		addr := fs.String("address", "", "this node's mesh address with the mesh's prefix length (10.99.0.7/16)")
		port := fs.Int("port", mesh.DefaultPort, "the UDP port")
		impl := mesh.ImplAuto
		fs.TextVar(&impl, "impl", mesh.ImplAuto, "which WireGuard runs: `auto|kernel|userspace` (auto: the kernel's where it has it, else userspace)")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		a, err := netip.ParsePrefix(*addr)
		if err != nil {
			return fmt.Errorf("-address %q: %w", *addr, err)
		}
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
		defer stop()
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		err = mesh.Run(ctx, mesh.Options{Dir: *dir, Interface: *iface, Address: a, Port: *port, Impl: impl,
			Log: log.New(os.Stderr, "", log.LstdFlags), Changed: hup})
		if errors.Is(err, mesh.ErrNoKernelWireGuard) {
			return fmt.Errorf("%w; or run wireguard-go in userspace: -impl userspace (or auto)", err)
		}
		return err
	case "share":
		listen := fs.String("listen", "", "the address to listen on (port 0: any)")
		idle := fs.Duration("idle", 2*time.Minute, "end after this long without a request")
		most := fs.Duration("max", 30*time.Minute, "end after this long")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		return serveShare(*listen, *idle, *most)
	case "sha256":
		return sha256sum(os.Stdout, args[1:])
	}
	return fmt.Errorf("unknown command %q: want key, up, peers, rotate, share or sha256", args[0])
}

// rotate prints the node's public key and its next one, or commits the
// next one.
func rotate(dir, commit string) error {
	if commit != "" {
		pub, err := mesh.ParseKey(commit)
		if err != nil {
			return fmt.Errorf("-commit %q: %w", commit, err)
		}
		if err := mesh.CommitKey(dir, pub); err != nil {
			return err
		}
		fmt.Printf("key=%s\n", pub)
		return nil
	}
	k, err := mesh.LoadOrCreateKey(dir)
	if err != nil {
		return err
	}
	next, err := mesh.NextKey(dir)
	if err != nil {
		return err
	}
	fmt.Printf("key=%s\nnext=%s\n", k.Public(), next.Public())
	return nil
}

func serveShare(listen string, idle, most time.Duration) error {
	data, err := io.ReadAll(os.Stdin)
	if err != nil {
		return err
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	l, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	fmt.Println("listening", l.Addr())
	logger := log.New(os.Stderr, "", log.LstdFlags)
	return share.Serve(context.Background(), l, share.Options{Token: lines[0], Files: lines[1:], Idle: idle, Max: most, Log: logger.Printf})
}

// sha256sum writes each file's digest and name as sha256sum does
// ("HEX  NAME"); a file it cannot read fails the command.
func sha256sum(w io.Writer, files []string) error {
	if len(files) == 0 {
		return errors.New("sha256: want the files to hash")
	}
	for _, name := range files {
		sum, _, err := bundle.HashFile(name)
		if err != nil {
			return fmt.Errorf("sha256: %w", err)
		}
		if _, err := fmt.Fprintf(w, "%s  %s\n", sum, name); err != nil {
			return err
		}
	}
	return nil
}
