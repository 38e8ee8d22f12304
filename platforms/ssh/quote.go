package ssh

import "strings"

// Quote returns s quoted for POSIX sh, as one word that sh reads back as
// exactly s. It is transit's one shell quoting function: every script
// transit builds (drivers, platforms) quotes outside values with it. It
// always quotes, even words that would not need it, so there is one rule
// to check: inside single quotes, each single quote in s written as
//
//	'\''
//
// (close the quotes, an escaped quote, reopen).
func Quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
