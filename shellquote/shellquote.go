// Package shellquote is transit's one POSIX shell quoting function, for
// every script transit builds (drivers, platforms) and every command it
// prints for a user to paste.
package shellquote

import "strings"

// safe are the bytes a word may consist of and stay unquoted: none of
// them means anything to sh, in any position.
const safe = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+@%"

// Quote returns s as one sh word that sh reads back as exactly s. A word of
// safe bytes only stays as it is, so scripts and messages stay readable;
// anything else is single-quoted, each single quote in s written as '\”
// (close the quotes, an escaped quote, reopen). The empty string is ”.
func Quote(s string) string {
	if s != "" && strings.Trim(s, safe) == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
