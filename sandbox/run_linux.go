package sandbox

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
)

// Run runs cmd inside the sandbox's namespace and waits for it, as
// Namespace.Run does. A Sandbox made by Serve has no namespace to run it
// in.
func (s *Sandbox) Run(cmd *exec.Cmd, started func(*os.Process)) error {
	if s.nsp == nil {
		return errors.New("sandbox: this sandbox serves a device made elsewhere (Serve): run commands through its Namespace")
	}
	return s.nsp.Run(cmd, started)
}

// Run runs cmd inside the namespace and waits for it, as cmd.Run would. The command dies with this process (SIGKILL on parent
// death). With Config.ResolvConf it sees a private /etc/resolv.conf naming
// ustack's DNS addresses: it is started through this program's Init in a
// mount namespace of its own, so this program must call Init first thing
// in main. started, if not nil, is called once the command is running.
//
// Without root, the command is the namespace helper itself (see the
// package doc): it runs as root of the sandbox's user namespace, and
// started gets its process, not cmd.Process, which stays nil. A Run
// without root can be done once per Namespace.
func (n *Namespace) Run(cmd *exec.Cmd, started func(*os.Process)) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	if n.cfg.ResolvConf && !n.cfg.NoDNS && !(n.cfg.DNS4.IsUnspecified() && (n.cfg.NoIPv6 || n.cfg.DNS6.IsUnspecified())) {
		f, err := os.CreateTemp("", "ustack-resolv-*.conf")
		if err != nil {
			return fmt.Errorf("sandbox: write the sandbox's resolv.conf: %w", err)
		}
		defer os.Remove(f.Name())
		var b strings.Builder
		fmt.Fprintf(&b, "# written by ustack tun: queries go to ustack, which relays them to the host's resolver\n")
		if !n.cfg.DNS4.IsUnspecified() {
			fmt.Fprintf(&b, "nameserver %v\n", n.cfg.DNS4)
		}
		if !n.cfg.NoIPv6 && !n.cfg.DNS6.IsUnspecified() {
			fmt.Fprintf(&b, "nameserver %v\n", n.cfg.DNS6)
		}
		if _, err := f.WriteString(b.String()); err != nil {
			f.Close()
			return fmt.Errorf("sandbox: write %s: %w", f.Name(), err)
		}
		if err := f.Close(); err != nil {
			return fmt.Errorf("sandbox: write %s: %w", f.Name(), err)
		}
		if h := n.ns.helper; h != nil {
			// Without root the helper holding the namespaces becomes the
			// command, and binds the file itself.
			return h.run(cmd, f.Name(), func() {
				if started != nil {
					started(h.process())
				}
			})
		}
		self, err := os.Executable()
		if err != nil {
			return fmt.Errorf("sandbox: find this program to start the command through: %w", err)
		}
		path := cmd.Path
		if cmd.Err != nil {
			return cmd.Err
		}
		// The helper's arguments: the command's path, then its whole argv.
		cmd.Args = append([]string{"ustack-sandbox-init", path}, cmd.Args...)
		cmd.Path = self
		env := cmd.Env
		if env == nil {
			env = os.Environ()
		}
		cmd.Env = append(append([]string(nil), env...), initEnv+"="+f.Name())
		cmd.SysProcAttr.Cloneflags |= syscall.CLONE_NEWNS
	}
	return n.ns.run(cmd, func() {
		if started != nil {
			started(cmd.Process)
		}
	})
}
