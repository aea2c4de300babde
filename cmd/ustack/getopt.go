package main

// The slirp4netns and pasta front ends read their command lines with
// glibc's getopt_long, and their callers depend on its details: options
// after positionals (slirp4netns), unique prefixes of long options
// (--mt for --mtu), clustered short options (-c6, -m1500), and the exact
// wording of its refusals (Podman retries pasta without --map-guest-addr
// when pasta's output says "unrecognized option '--map-guest-addr").
// Go's flag package does none of this, so this file is getopt_long as
// glibc 2.36 (Debian 12's) behaves, for the parts the two front ends use:
// options with no argument or a required one, permuting (GNU's default)
// or stopping at the first positional (an optstring that starts with
// '+'). Not implemented: optional arguments ("::"), -W, getopt_long_only,
// and the POSIXLY_CORRECT environment variable, which would make glibc
// stop at the first positional for slirp4netns too.

import (
	"fmt"
	"strings"
)

// optArg says whether an option takes an argument.
type optArg uint8

const (
	noArg       optArg = iota // glibc's no_argument
	requiredArg               // glibc's required_argument
)

// longOpt is one entry of getopt_long's table of long options.
type longOpt struct {
	name string
	arg  optArg
	// id is what the option parses to: the byte of the short option it
	// spells out (--mtu is 'm'), or a number above 255 for a long-only
	// option. Two entries with the same id and arg are one option under
	// two names, which keeps a prefix of both from being ambiguous.
	id int
}

// firstLongOnly is the smallest id of an option without a short form.
const firstLongOnly = 256

// optionTable is a program's command line grammar, as getopt_long takes it.
type optionTable struct {
	// short is getopt's optstring without its mode prefix: each option
	// byte, followed by ':' when it takes an argument.
	short string
	// long is the table of long options, in the program's order (the
	// order in which an ambiguous prefix lists its possibilities).
	long []longOpt
	// inOrder is an optstring starting with '+': options end at the
	// first positional, as for a command and its own arguments (pasta).
	// Otherwise positionals are set aside and options after them are
	// still options (slirp4netns).
	inOrder bool
}

// parsedOpt is one option as getopt_long returned it.
type parsedOpt struct {
	id  int
	arg string // the argument, for an option that takes one
}

// getoptError is a command line getopt_long itself refuses; its message
// is glibc's, prefixed with the program name as glibc prefixes argv[0].
type getoptError struct{ msg string }

func (e *getoptError) Error() string { return e.msg }

// getopt walks one command line. It is not safe for concurrent use.
type getopt struct {
	t    *optionTable
	prog string
	args []string
	next int    // index in args of the next word to look at
	more string // the rest of a cluster of short options (after "-c" in "-c6")
	pos  []string
	done bool
}

// scan starts walking args (without the program name) for prog, the
// name getopt's messages start with (argv[0] in C).
func (t *optionTable) scan(prog string, args []string) *getopt {
	return &getopt{t: t, prog: prog, args: args}
}

// option returns the next option, or ok false once there are no more
// (positionals then returns the positionals). After an error the walk
// is over: both front ends exit at the first refused option.
func (g *getopt) option() (o parsedOpt, ok bool, err error) {
	if g.done {
		return o, false, nil
	}
	if g.more != "" {
		return g.shortOption()
	}
	for g.next < len(g.args) {
		a := g.args[g.next]
		switch {
		case a == "--":
			g.pos = append(g.pos, g.args[g.next+1:]...)
			g.finish()
			return o, false, nil
		case len(a) < 2 || a[0] != '-':
			if g.t.inOrder {
				g.pos = append(g.pos, g.args[g.next:]...)
				g.finish()
				return o, false, nil
			}
			g.pos = append(g.pos, a)
			g.next++
		case a[1] == '-':
			g.next++
			return g.longOption(a[2:])
		default:
			g.next++
			g.more = a[1:]
			return g.shortOption()
		}
	}
	g.finish()
	return o, false, nil
}

// positionals returns the words that are not options, in their order.
func (g *getopt) positionals() []string { return g.pos }

func (g *getopt) finish() {
	g.next, g.more, g.done = len(g.args), "", true
}

func (g *getopt) fail(format string, a ...any) (parsedOpt, bool, error) {
	g.finish()
	return parsedOpt{}, false, &getoptError{msg: g.prog + ": " + fmt.Sprintf(format, a...)}
}

func (g *getopt) shortOption() (parsedOpt, bool, error) {
	c := g.more[0]
	g.more = g.more[1:]
	i := strings.IndexByte(g.t.short, c)
	if i < 0 || c == ':' || c == ';' {
		return g.fail("invalid option -- '%s'", []byte{c})
	}
	o := parsedOpt{id: int(c)}
	if i+1 < len(g.t.short) && g.t.short[i+1] == ':' {
		switch {
		case g.more != "":
			o.arg, g.more = g.more, ""
		case g.next < len(g.args):
			o.arg = g.args[g.next]
			g.next++
		default:
			return g.fail("option requires an argument -- '%s'", []byte{c})
		}
	}
	return o, true, nil
}

func (g *getopt) longOption(word string) (parsedOpt, bool, error) {
	name, value, hasValue := strings.Cut(word, "=")
	found := -1
	for i, l := range g.t.long {
		if l.name == name {
			found = i
			break
		}
	}
	if found < 0 {
		// A unique prefix names its option. Prefixes of two names of one
		// option (same id and argument) are not ambiguous; glibc lists
		// the first match and every later one that differs from it.
		var ambiguous []string
		for i, l := range g.t.long {
			if !strings.HasPrefix(l.name, name) {
				continue
			}
			if found < 0 {
				found = i
				continue
			}
			if f := g.t.long[found]; l.id != f.id || l.arg != f.arg {
				if ambiguous == nil {
					ambiguous = append(ambiguous, "'--"+f.name+"'")
				}
				ambiguous = append(ambiguous, "'--"+l.name+"'")
			}
		}
		if ambiguous != nil {
			return g.fail("option '--%s' is ambiguous; possibilities: %s", word, strings.Join(ambiguous, " "))
		}
		if found < 0 {
			return g.fail("unrecognized option '--%s'", word)
		}
	}
	l := g.t.long[found]
	o := parsedOpt{id: l.id}
	switch {
	case hasValue && l.arg == noArg:
		return g.fail("option '--%s' doesn't allow an argument", l.name)
	case hasValue:
		o.arg = value
	case l.arg == requiredArg && g.next < len(g.args):
		o.arg = g.args[g.next]
		g.next++
	case l.arg == requiredArg:
		return g.fail("option '--%s' requires an argument", l.name)
	}
	return o, true, nil
}

// takesArg reports whether the option id takes an argument.
func (t *optionTable) takesArg(id int) bool {
	if id < firstLongOnly {
		i := strings.IndexByte(t.short, byte(id))
		if i >= 0 {
			return i+1 < len(t.short) && t.short[i+1] == ':'
		}
	}
	for _, l := range t.long {
		if l.id == id {
			return l.arg == requiredArg
		}
	}
	return false
}

// spell returns the canonical words of the options and positionals, in
// a form that getopt reads back to the same options and positionals:
// the short form where there is one (-m 1500), else the option's first
// long name (--cidr=10.0.2.0/24), then "--" and the positionals. It is
// how a front end's options are written back into a command line.
func (t *optionTable) spell(opts []parsedOpt, positionals []string) []string {
	var w []string
	for _, o := range opts {
		if o.id < firstLongOnly && strings.IndexByte(t.short, byte(o.id)) >= 0 {
			w = append(w, "-"+string([]byte{byte(o.id)}))
			if t.takesArg(o.id) {
				w = append(w, o.arg)
			}
			continue
		}
		for _, l := range t.long {
			if l.id != o.id {
				continue
			}
			if l.arg == requiredArg {
				w = append(w, "--"+l.name+"="+o.arg)
			} else {
				w = append(w, "--"+l.name)
			}
			break
		}
	}
	if len(positionals) > 0 {
		w = append(w, "--")
		w = append(w, positionals...)
	}
	return w
}

// cStrtol reads a number as C's strtol(s, &end, base) does, for the
// options the originals read with it: leading white space, a sign, and
// with base 0 a 0x (hexadecimal) or 0 (octal) prefix; rest is what
// follows the number (s itself when there is no number, and then v is
// 0), and overflow is strtol's ERANGE (v is then clamped, as C clamps).
// Base is 0, 8, 10 or 16.
func cStrtol(s string, base int) (v int64, rest string, overflow bool) {
	u, neg, rest, overflow := cStrtoMagnitude(s, base)
	switch {
	case neg && (overflow || u > 1<<63):
		return -1 << 63, rest, true
	case neg:
		return -int64(u), rest, false
	case overflow || u > 1<<63-1:
		return 1<<63 - 1, rest, true
	}
	return int64(u), rest, false
}

// cStrtoul reads a number as C's strtoul does: as cStrtol, except that
// a negative number wraps around (strtoul("-1") is the largest value).
func cStrtoul(s string, base int) (v uint64, rest string, overflow bool) {
	u, neg, rest, overflow := cStrtoMagnitude(s, base)
	switch {
	case overflow:
		return 1<<64 - 1, rest, true
	case neg:
		return -u, rest, false
	}
	return u, rest, false
}

func cStrtoMagnitude(s string, base int) (u uint64, neg bool, rest string, overflow bool) {
	i := 0
	for i < len(s) && strings.IndexByte(" \t\n\v\f\r", s[i]) >= 0 {
		i++
	}
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		neg = s[i] == '-'
		i++
	}
	hexPrefix := i+2 < len(s) && s[i] == '0' && (s[i+1] == 'x' || s[i+1] == 'X') && digitValue(s[i+2]) < 16
	switch {
	case (base == 0 || base == 16) && hexPrefix:
		base = 16
		i += 2
	case base == 0 && i < len(s) && s[i] == '0':
		base = 8
	case base == 0:
		base = 10
	}
	start := i
	for ; i < len(s); i++ {
		d := digitValue(s[i])
		if d >= base {
			break
		}
		if u > (1<<64-1-uint64(d))/uint64(base) {
			overflow = true
		}
		u = u*uint64(base) + uint64(d)
	}
	if i == start {
		return 0, false, s, false
	}
	return u, neg, s[i:], overflow
}

// digitValue is c's value as a digit in bases up to 36, or 36 when c is
// not a digit.
func digitValue(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'z':
		return int(c-'a') + 10
	case 'A' <= c && c <= 'Z':
		return int(c-'A') + 10
	}
	return 36
}
