package localnodes

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/cloudtransit/transit/cloudsim"
)

// With Apart a region's security groups are enforced in its router, which
// everything entering the region from outside crosses: it arrives on the
// uplink and, after the router's DNAT, goes to a machine's private
// address. The router's FORWARD jumps first to the region's ingress
// chain for what comes in on the uplink, which lets in replies
// (conntrack ESTABLISHED, RELATED), the host's own traffic (its uplink
// address: the operator, transit's SSH, as the local driver always lets
// the host in) and each rule's traffic (source, protocol, destination
// ports), and drops the rest. Sources are matched as they arrive: the
// host's address, or another region's machine's public address (its
// router's SNAT), never a private one.
//
// Traffic between the region's machines (on its bridge) does not come in
// on the uplink and is not filtered, as in a VPC whose group lets its
// members in; nor is what leaves the region (the clouds' default egress
// rules allow all). The local driver's own group for the region (its
// chain for what goes to the bridge) lets every source in, so that it
// does not filter a second time.

// ingressChain is a region's chain in its router's filter table.
func ingressChain(root, region string) string {
	return "CLOUDSIM-I-" + strings.ToUpper(rootHash(root+"\x00"+region, 8))
}

// everyone is the local driver's group sources with Apart.
var everyone = []string{"0.0.0.0/0"}

// filterIngress makes rules what the region's router lets in from
// outside (besides replies and the host's traffic), in one
// iptables-restore: the chain is flushed and refilled and its jump put
// first in FORWARD in one transaction, so a connection under way is never
// cut and nothing unfiltered gets in meanwhile. IPv6 rules are skipped
// (the backing is IPv4).
func (b *Backer) filterIngress(ctx context.Context, region string, rules []cloudsim.Rule) error {
	host, chain := b.operator(region), ingressChain(b.Root, region)
	b.natMu.Lock()
	defer b.natMu.Unlock()
	filter := tableIn(ctx, routerPath(b.Root, region), "filter")
	jumped := filter("-C", "FORWARD", "-i", uplink, "-j", chain) == nil
	in, err := ingressRestore(chain, host, rules, jumped)
	if err != nil {
		return fmt.Errorf("cloudsim: region %s's firewall: %w", region, err)
	}
	if err := shIn(ctx, in, "nsenter", "--net="+routerPath(b.Root, region), "--", "iptables-restore", "-w", "--noflush"); err != nil {
		return fmt.Errorf("cloudsim: region %s's firewall: %w", region, err)
	}
	return nil
}

// ingressRestore is the iptables-restore --noflush input that refills a
// region's ingress chain and puts the jump to it first in FORWARD (moving
// it there when it exists: jumped).
func ingressRestore(chain string, operator netip.Addr, rules []cloudsim.Rule, jumped bool) (string, error) {
	var w strings.Builder
	line := func(args ...string) { w.WriteString(strings.Join(args, " ") + "\n") }
	line("*filter")
	line(":" + chain + " - [0:0]")
	line("-F", chain)
	line("-A", chain, "-m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT")
	line("-A", chain, "-s", operator.String()+"/32", "-j ACCEPT")
	for _, r := range rules {
		spec, ok, err := ruleSpec(r)
		if err != nil {
			return "", err
		}
		if ok {
			line(append([]string{"-A", chain}, spec...)...)
		}
	}
	line("-A", chain, "-j DROP")
	if jumped {
		line("-D FORWARD -i", uplink, "-j", chain)
	}
	line("-I FORWARD 1 -i", uplink, "-j", chain)
	line("COMMIT")
	return w.String(), nil
}

// ruleSpec is a rule's match and ACCEPT; ok is false for an IPv6 rule.
func ruleSpec(r cloudsim.Rule) (spec []string, ok bool, err error) {
	if !r.Source.IsValid() {
		return nil, false, fmt.Errorf("rule %v: no source", r)
	}
	if !r.Source.Addr().Is4() {
		return nil, false, nil
	}
	spec = []string{"-s", r.Source.Masked().String()}
	switch r.Protocol {
	case "":
	case "icmp":
		spec = append(spec, "-p", "icmp")
	case "tcp", "udp":
		spec = append(spec, "-p", r.Protocol)
		if r.From < 0 || r.To > 65535 || r.From > r.To {
			return nil, false, fmt.Errorf("rule %v: ports %d through %d", r, r.From, r.To)
		}
		if r.From != 0 || r.To != 0 {
			spec = append(spec, "-m", r.Protocol, "--dport", strconv.Itoa(r.From)+":"+strconv.Itoa(r.To))
		}
	default:
		return nil, false, fmt.Errorf("rule %v: protocol %q is not tcp, udp, icmp or every one (\"\")", r, r.Protocol)
	}
	return append(spec, "-j", "ACCEPT"), true, nil
}
