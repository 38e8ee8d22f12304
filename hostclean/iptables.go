package hostclean

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// tables are the iptables tables transit makes chains in: the local
// driver's groups and input chains and cloudsim's forward chain in
// filter, cloudsim's DNAT and SNAT chains in nat.
var tables = []string{"filter", "nat"}

// rule is one rule of an `iptables -S` dump.
type rule struct {
	chain string
	args  []string // the rule after "-A CHAIN", one argument each
	line  string   // as iptables printed it
}

// target is the chain the rule jumps or goes to, or its verdict.
func (r rule) target() string {
	for i, a := range r.args {
		if (a == "-j" || a == "-g") && i+1 < len(r.args) {
			return r.args[i+1]
		}
	}
	return ""
}

// comment is the rule's "-m comment --comment" text, if any.
func (r rule) comment() string {
	for i, a := range r.args {
		if a == "--comment" && i+1 < len(r.args) {
			return r.args[i+1]
		}
	}
	return ""
}

// dump is a table as `iptables -S` prints it.
type dump struct {
	chains []string // user-defined chains ("-N")
	rules  []rule
}

// parseDump reads `iptables -S` output.
func parseDump(out string) (dump, error) {
	var d dump
	for line := range strings.Lines(out) {
		line = strings.TrimSpace(line)
		f, err := splitArgs(line)
		if err != nil {
			return dump{}, fmt.Errorf("iptables -S line %q: %w", line, err)
		}
		switch {
		case len(f) == 2 && f[0] == "-N":
			d.chains = append(d.chains, f[1])
		case len(f) >= 2 && f[0] == "-A":
			d.rules = append(d.rules, rule{chain: f[1], args: f[2:], line: line})
		}
	}
	return d, nil
}

// splitArgs splits an `iptables -S` line into arguments as a shell
// would: iptables quotes an argument with spaces (a comment) in double
// quotes and escapes a quote or backslash in it with a backslash.
func splitArgs(s string) ([]string, error) {
	var out []string
	var cur strings.Builder
	inArg, quoted := false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quoted && c == '\\' && i+1 < len(s):
			i++
			cur.WriteByte(s[i])
		case c == '"':
			quoted, inArg = !quoted, true
		case !quoted && (c == ' ' || c == '\t'):
			if inArg {
				out = append(out, cur.String())
				cur.Reset()
				inArg = false
			}
		default:
			cur.WriteByte(c)
			inArg = true
		}
	}
	if quoted {
		return nil, errors.New("unterminated quote")
	}
	if inArg {
		out = append(out, cur.String())
	}
	return out, nil
}

// iptablesDump reads a table. (Listing one chain that is missing fails
// with a misleading message on the nf_tables backend, as drivers/local
// notes, so the whole table is read.)
func iptablesDump(ctx context.Context, table string) (dump, error) {
	out, err := run(ctx, "iptables", "-w", "-t", table, "-S")
	if err != nil {
		return dump{}, err
	}
	return parseDump(out)
}

// findIptables lists transit's chains in every table, with the chains
// that jump to them, and the platform conformance suite's OUTPUT rules.
func findIptables(ctx context.Context) ([]Item, error) {
	if _, err := lookPath("iptables"); err != nil {
		return nil, nil // no iptables, so no chain or rule of transit's
	}
	var items []Item
	var errs []error
	for _, table := range tables {
		d, err := iptablesDump(ctx, table)
		if err != nil {
			errs = append(errs, fmt.Errorf("read the %s table: %w", table, err))
			continue
		}
		for _, c := range d.chains {
			if !isChain(c) {
				continue
			}
			var from []string
			for _, r := range d.rules {
				if r.target() == c && !slices.Contains(from, r.chain) {
					from = append(from, r.chain)
				}
			}
			it := Item{Kind: KindChain, Name: table + " " + c, table: table, chain: c}
			if len(from) > 0 {
				it.Detail = "jumped to from " + strings.Join(from, ", ")
			}
			items = append(items, it)
		}
		if table != "filter" {
			continue
		}
		for _, r := range d.rules {
			if r.chain == "OUTPUT" && isTestRuleComment(r.comment()) {
				items = append(items, Item{Kind: KindRule, Name: r.line, Detail: "in the " + table + " table",
					table: table, chain: r.chain, args: r.args})
			}
		}
	}
	return items, errors.Join(errs...)
}

// removeRules deletes the rules that are still there.
func removeRules(ctx context.Context, items []Item) []error {
	if len(items) == 0 {
		return nil
	}
	var errs []error
	for _, table := range tables {
		var mine []Item
		for _, it := range items {
			if it.table == table {
				mine = append(mine, it)
			}
		}
		if len(mine) == 0 {
			continue
		}
		d, err := iptablesDump(ctx, table)
		if err != nil {
			errs = append(errs, fmt.Errorf("remove rules: read the %s table: %w", table, err))
			continue
		}
		for _, it := range mine {
			if !slices.ContainsFunc(d.rules, func(r rule) bool { return r.chain == it.chain && slices.Equal(r.args, it.args) }) {
				continue
			}
			args := append([]string{"-w", "-t", table, "-D", it.chain}, it.args...)
			if _, err := run(ctx, "iptables", args...); err != nil {
				errs = append(errs, fmt.Errorf("remove rule %s: %w", it.Name, err))
			}
		}
	}
	return errs
}

// removeChains deletes, table by table, every rule that jumps to one of
// the chains (from any chain not itself removed), then flushes the
// chains, then deletes them: chains that jump to one another go too.
func removeChains(ctx context.Context, items []Item) []error {
	var errs []error
	for _, table := range tables {
		var chains []string
		for _, it := range items {
			if it.table == table {
				chains = append(chains, it.chain)
			}
		}
		if len(chains) == 0 {
			continue
		}
		d, err := iptablesDump(ctx, table)
		if err != nil {
			errs = append(errs, fmt.Errorf("remove chains: read the %s table: %w", table, err))
			continue
		}
		for _, r := range d.rules {
			if !slices.Contains(chains, r.target()) || slices.Contains(chains, r.chain) {
				continue
			}
			args := append([]string{"-w", "-t", table, "-D", r.chain}, r.args...)
			if _, err := run(ctx, "iptables", args...); err != nil {
				errs = append(errs, fmt.Errorf("remove the jump %q to %s: %w", r.line, r.target(), err))
			}
		}
		var present []string
		for _, c := range chains {
			if slices.Contains(d.chains, c) {
				present = append(present, c)
			}
		}
		flushed := present[:0:0]
		for _, c := range present {
			if _, err := run(ctx, "iptables", "-w", "-t", table, "-F", c); err != nil {
				errs = append(errs, fmt.Errorf("flush chain %s %s: %w", table, c, err))
				continue
			}
			flushed = append(flushed, c)
		}
		for _, c := range flushed {
			if _, err := run(ctx, "iptables", "-w", "-t", table, "-X", c); err != nil {
				errs = append(errs, fmt.Errorf("delete chain %s %s: %w", table, c, err))
			}
		}
	}
	return errs
}
