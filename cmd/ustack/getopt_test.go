package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// getoptTestTable is small on purpose, with what both front ends' tables
// have: short options with and without arguments, long names for them,
// long-only options, a prefix shared by two options, and one option
// under two names.
var getoptTestTable = optionTable{
	short: "ab:c6",
	long: []longOpt{
		{"alpha", noArg, 'a'},
		{"beta", requiredArg, 'b'},
		{"disable-x", noArg, firstLongOnly},
		{"disable-y", requiredArg, firstLongOnly + 1},
		{"sock", requiredArg, firstLongOnly + 2},
		{"sock-path", requiredArg, firstLongOnly + 2},
		{"out", requiredArg, firstLongOnly + 3},
		{"out6", requiredArg, firstLongOnly + 4},
		{"sock-x", noArg, firstLongOnly + 5},
	},
}

// parseAll walks the whole command line.
func parseAll(t *optionTable, prog string, args []string) ([]parsedOpt, []string, error) {
	g := t.scan(prog, args)
	var opts []parsedOpt
	for {
		o, ok, err := g.option()
		if err != nil {
			return opts, nil, err
		}
		if !ok {
			return opts, g.positionals(), nil
		}
		opts = append(opts, o)
	}
}

func TestGetopt(t *testing.T) {
	permute, inOrder := getoptTestTable, getoptTestTable
	inOrder.inOrder = true
	o := func(id int, arg string) parsedOpt { return parsedOpt{id: id, arg: arg} }
	for _, tc := range []struct {
		name    string
		table   *optionTable
		args    []string
		opts    []parsedOpt
		pos     []string
		wantErr string
	}{
		{"nothing", &permute, nil, nil, nil, ""},
		{"short", &permute, []string{"-a", "-b", "x"}, []parsedOpt{o('a', ""), o('b', "x")}, nil, ""},
		{"short attached", &permute, []string{"-bx"}, []parsedOpt{o('b', "x")}, nil, ""},
		{"cluster", &permute, []string{"-ca6"}, []parsedOpt{o('c', ""), o('a', ""), o('6', "")}, nil, ""},
		{"cluster ending in an argument", &permute, []string{"-cbx"}, []parsedOpt{o('c', ""), o('b', "x")}, nil, ""},
		{"cluster then its argument", &permute, []string{"-cb", "x"}, []parsedOpt{o('c', ""), o('b', "x")}, nil, ""},
		{"argument looking like an option", &permute, []string{"-b", "--alpha"}, []parsedOpt{o('b', "--alpha")}, nil, ""},
		{"argument --", &permute, []string{"--beta", "--", "p"}, []parsedOpt{o('b', "--")}, []string{"p"}, ""},
		{"long", &permute, []string{"--alpha", "--beta", "x"}, []parsedOpt{o('a', ""), o('b', "x")}, nil, ""},
		{"long =", &permute, []string{"--beta=x=y"}, []parsedOpt{o('b', "x=y")}, nil, ""},
		{"long = empty", &permute, []string{"--beta="}, []parsedOpt{o('b', "")}, nil, ""},
		{"prefix", &permute, []string{"--al", "--be=1"}, []parsedOpt{o('a', ""), o('b', "1")}, nil, ""},
		{"exact beats prefix", &permute, []string{"--out", "1", "--out6", "2"}, []parsedOpt{o(firstLongOnly+3, "1"), o(firstLongOnly+4, "2")}, nil, ""},
		{"prefix of two names of one option", pastaTable, []string{"--sock", "p"}, []parsedOpt{o('s', "p")}, nil, ""},
		{"prefix of two options", &permute, []string{"--sock-", "p"}, nil, nil, "prog: option '--sock-' is ambiguous; possibilities: '--sock-path' '--sock-x'"},
		{"permuted", &permute, []string{"p1", "-a", "p2", "--beta", "x", "p3"}, []parsedOpt{o('a', ""), o('b', "x")}, []string{"p1", "p2", "p3"}, ""},
		{"-- ends options", &permute, []string{"p1", "--", "-a", "--beta"}, nil, []string{"p1", "-a", "--beta"}, ""},
		{"- is positional", &permute, []string{"-", "-a"}, []parsedOpt{o('a', "")}, []string{"-"}, ""},
		{"empty is positional", &permute, []string{"", "-a"}, []parsedOpt{o('a', "")}, []string{""}, ""},
		{"in order stops", &inOrder, []string{"-a", "cmd", "-a", "--beta"}, []parsedOpt{o('a', "")}, []string{"cmd", "-a", "--beta"}, ""},
		{"in order --", &inOrder, []string{"-a", "--", "-a", "--", "x"}, []parsedOpt{o('a', "")}, []string{"-a", "--", "x"}, ""},
		{"invalid short", &permute, []string{"-x"}, nil, nil, "prog: invalid option -- 'x'"},
		{"invalid short in cluster", &permute, []string{"-ax"}, []parsedOpt{o('a', "")}, nil, "prog: invalid option -- 'x'"},
		{"colon is no option", &permute, []string{"-:"}, nil, nil, "prog: invalid option -- ':'"},
		{"non-ASCII byte", &permute, []string{"-\xff"}, nil, nil, "prog: invalid option -- '\xff'"},
		{"missing short argument", &permute, []string{"-b"}, nil, nil, "prog: option requires an argument -- 'b'"},
		{"missing long argument", &permute, []string{"--be"}, nil, nil, "prog: option '--beta' requires an argument"},
		{"unexpected long argument", &permute, []string{"--al=1"}, nil, nil, "prog: option '--alpha' doesn't allow an argument"},
		{"unrecognized", &permute, []string{"--gamma"}, nil, nil, "prog: unrecognized option '--gamma'"},
		{"unrecognized with =", &permute, []string{"--gamma=1"}, nil, nil, "prog: unrecognized option '--gamma=1'"},
		{"three dashes", &permute, []string{"---a"}, nil, nil, "prog: unrecognized option '---a'"},
		{"ambiguous", &permute, []string{"--dis"}, nil, nil, "prog: option '--dis' is ambiguous; possibilities: '--disable-x' '--disable-y'"},
		{"ambiguous with =", &permute, []string{"--dis=1"}, nil, nil, "prog: option '--dis=1' is ambiguous; possibilities: '--disable-x' '--disable-y'"},
		{"ambiguous skips a second name of the first", &permute, []string{"--soc"}, nil, nil, "prog: option '--soc' is ambiguous; possibilities: '--sock' '--sock-x'"},
		{"ambiguous lists every match unlike the first", &permute, []string{"--=1"}, nil, nil, "prog: option '--=1' is ambiguous; possibilities: '--alpha' '--beta' '--disable-x' '--disable-y' '--sock' '--sock-path' '--out' '--out6' '--sock-x'"},
		{"error ends the walk", &permute, []string{"--gamma", "-a"}, nil, nil, "prog: unrecognized option '--gamma'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts, pos, err := parseAll(tc.table, "prog", tc.args)
			if tc.wantErr != "" {
				require.EqualError(t, err, tc.wantErr)
				require.IsType(t, &getoptError{}, err)
				require.Equal(t, tc.opts, opts)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.opts, opts)
			require.Equal(t, tc.pos, pos)
		})
	}
}

func TestCStrtol(t *testing.T) {
	for _, tc := range []struct {
		in       string
		base     int
		v        int64
		rest     string
		overflow bool
	}{
		{"1500", 10, 1500, "", false},
		{" \t+42x", 10, 42, "x", false},
		{"-7", 10, -7, "", false},
		{"", 10, 0, "", false},
		{"abc", 10, 0, "abc", false},
		{"-", 10, 0, "-", false},
		{"0x1f", 0, 31, "", false},
		{"0x1f", 16, 31, "", false},
		{"0X1F", 0, 31, "", false},
		{"0x", 0, 0, "x", false},
		{"0xg", 16, 0, "xg", false},
		{"010", 0, 8, "", false},
		{"09", 0, 0, "9", false},
		{"010", 10, 10, "", false},
		{"9223372036854775807", 10, 1<<63 - 1, "", false},
		{"9223372036854775808", 10, 1<<63 - 1, "", true},
		{"-9223372036854775808", 10, -1 << 63, "", false},
		{"-9223372036854775809", 10, -1 << 63, "", true},
		{"99999999999999999999999", 10, 1<<63 - 1, "", true},
	} {
		v, rest, overflow := cStrtol(tc.in, tc.base)
		require.Equal(t, []any{tc.v, tc.rest, tc.overflow}, []any{v, rest, overflow}, "strtol(%q, %d)", tc.in, tc.base)
	}
	for _, tc := range []struct {
		in       string
		v        uint64
		overflow bool
	}{
		{"65535", 65535, false},
		{"-1", 1<<64 - 1, false},
		{"-0", 0, false},
		{"18446744073709551615", 1<<64 - 1, false},
		{"18446744073709551616", 1<<64 - 1, true},
	} {
		v, _, overflow := cStrtoul(tc.in, 10)
		require.Equal(t, []any{tc.v, tc.overflow}, []any{v, overflow}, "strtoul(%q)", tc.in)
	}
}

// splitArgs turns a fuzz input into a command line: argv's words cannot
// hold a NUL, so NUL separates them.
func splitArgs(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, "\x00")
}

// FuzzGetopt checks that getopt never panics on any command line, on
// each table the front ends use, and that what it accepts, spelled back
// canonically, parses to the same options and positionals.
func FuzzGetopt(f *testing.F) {
	for _, seed := range getoptSeeds {
		f.Add(strings.Join(seed, "\x00"))
	}
	tables := []*optionTable{slirpTable, pastaTable, &getoptTestTable}
	f.Fuzz(func(t *testing.T, in string) {
		args := splitArgs(in)
		for _, table := range tables {
			opts, pos, err := parseAll(table, "prog", args)
			if err != nil {
				require.True(t, strings.HasPrefix(err.Error(), "prog: "), err.Error())
				continue
			}
			if table.inOrder && len(pos) > 0 {
				// In order, the positionals are the end of the line.
				require.Equal(t, pos, args[len(args)-len(pos):])
			}
			again := table.spell(opts, pos)
			opts2, pos2, err := parseAll(table, "prog", again)
			require.NoError(t, err, "%q spelled as %q", args, again)
			require.Equal(t, opts, opts2, "%q spelled as %q", args, again)
			require.Equal(t, pos, pos2, "%q spelled as %q", args, again)
		}
	})
}

// getoptSeeds are the command lines the callers pass (see the front
// ends' caller tests) and some of getopt's corners.
var getoptSeeds = [][]string{
	{"--disable-host-loopback", "--mtu=65520", "--enable-sandbox", "--enable-seccomp", "-c", "-e", "3", "-r", "4", "--netns-type=path", "/run/user/1000/netns/x", "tap0"},
	{"--mtu", "65520", "-r", "3", "--disable-host-loopback", "--cidr", "10.0.2.0/24", "--api-socket", "/tmp/a", "1234", "tap0"},
	{"--config-net", "-t", "8080-8080:80-80", "-t", "none", "-u", "none", "-T", "none", "-U", "none", "--no-map-gw", "--quiet", "--netns", "/run/user/1000/netns/x", "--map-guest-addr", "169.254.1.2"},
	{"--stderr", "--ns-ifname=tap0", "--mtu=65520", "--config-net", "--address=10.0.2.100", "--netmask=24", "--gateway=10.0.2.2", "--dns-forward=10.0.2.3", "--no-map-gw", "--ipv4-only", "--tcp-ports=none", "--udp-ports=none", "1234"},
	{"-c6m1500", "p", "--dis", "--=x", "-", "--", "-a"},
	{"-qfm", "0", "--", "sh", "-c", "true"},
}
