package main

import (
	"os"
	"strings"
	"syscall"
)

// sysmonTickSetting is the GODEBUG setting -sysmon-tick runs ustack tun
// with. The Go runtime's monitor thread (sysmon) polls every 20 us to
// 10 ms while any P runs, and sleeps until woken once every P is idle;
// the first system call after an idle spell then wakes it (a futex call),
// and it polls at 20 us again for a millisecond, retaking the P from
// system calls that span two of its ticks onto another thread. A relay
// that goes idle between every request and its answer pays that on
// every message. With schedtrace set the runtime keeps sysmon on its
// backed-off tick (10 ms) instead; the period, 2^31-1 ms (24.8 days, the
// most the runtime takes), is so long that the trace is written only
// when the machine has been up longer than that, once per period.
const sysmonTickSetting = "schedtrace=2147483647"

// sysmonTickEnv carries $GODEBUG as ustack was started with across the
// execution again ("=VALUE", or empty when it was unset), so that CMD
// gets it back, and marks the execution as the second one.
const sysmonTickEnv = "USTACK_TUN_GODEBUG"

// asCommand is set by main: this process is the ustack command, not a
// test calling run, and may execute itself again.
var asCommand bool

// execWithSysmonTick executes this program again with sysmonTickSetting
// added to $GODEBUG, when ustack runs as a command that serves a sandbox
// (not in a test) and $GODEBUG does not set schedtrace already (an explicit
// setting wins). It returns only when it did not execute: nil when there
// was nothing to do, or the reason it could not. In the execution again
// it restores the environment ustack was started with (the runtime read
// $GODEBUG at start), which CMD inherits.
func execWithSysmonTick() error {
	if orig, again := os.LookupEnv(sysmonTickEnv); again {
		os.Unsetenv(sysmonTickEnv)
		if v, set := strings.CutPrefix(orig, "="); set {
			os.Setenv("GODEBUG", v)
		} else {
			os.Unsetenv("GODEBUG")
		}
		return nil
	}
	if !asCommand {
		return nil
	}
	godebug, set := os.LookupEnv("GODEBUG")
	for _, s := range strings.Split(godebug, ",") {
		if strings.HasPrefix(strings.TrimSpace(s), "schedtrace=") {
			return nil
		}
	}
	env := make([]string, 0, len(os.Environ())+2)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GODEBUG=") && !strings.HasPrefix(kv, sysmonTickEnv+"=") {
			env = append(env, kv)
		}
	}
	orig, tick := "", sysmonTickSetting
	if set {
		orig = "=" + godebug
		if godebug != "" {
			tick = godebug + "," + sysmonTickSetting
		}
	}
	env = append(env, "GODEBUG="+tick, sysmonTickEnv+"="+orig)
	return syscall.Exec(selfPath(), os.Args, env)
}

// selfPath is the file this program runs from: its path, so that the
// process keeps its name (ps, top), if that still names the same file,
// or else /proc/self/exe (the process would be called "exe").
func selfPath() string {
	const proc = "/proc/self/exe"
	self, err := os.Executable()
	if err != nil {
		return proc
	}
	a, err := os.Stat(self)
	if err != nil {
		return proc
	}
	if b, err := os.Stat(proc); err != nil || !os.SameFile(a, b) {
		return proc
	}
	return self
}
