// Package optional is the machine-readable list of the optional
// interfaces a ustack link endpoint may implement: those that ustack or
// gVisor finds on an endpoint by type assertion. link/doc.go describes
// each; this package's tests check that the two lists agree, that
// linktest.Featured implements every one, and that every wrapper endpoint
// in the tree passes every one through (optionaltest.Transparent).
//
// To add an optional interface: add it here and to link/doc.go, give
// linktest.Featured an implementation, linkutil.Passthrough a pass-through
// and optionaltest a probe; the tests fail until all of it is done.
package optional

import (
	"reflect"

	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/ustack-dev/ustack/link"
	"github.com/ustack-dev/ustack/poll"
	"github.com/ustack-dev/ustack/sched"
)

// Interface is one optional interface of a link endpoint.
type Interface struct {
	// Name is the interface as link/doc.go names it, package-qualified.
	Name string
	// Type is the interface type.
	Type reflect.Type
	// FoundBy says who looks for it, where.
	FoundBy string
}

// Interfaces lists every optional interface of a link endpoint, in the
// order link/doc.go describes them.
var Interfaces = []Interface{
	{"poll.Source", reflect.TypeFor[poll.Source](), "stack.AddNIC registers it with the stack's busy poller"},
	{"sched.WritableNotifier", reflect.TypeFor[sched.WritableNotifier](), "every sched discipline, when it is built over the link"},
	{"sched.RoundNotifier", reflect.TypeFor[sched.RoundNotifier](), "every sched discipline, when it is built over the link"},
	{"stack.GSOEndpoint", reflect.TypeFor[stack.GSOEndpoint](), "gVisor's routes, for every packet a TCP endpoint sizes"},
	{"link.Coalescer", reflect.TypeFor[link.Coalescer](), "stack.AddNIC on a forwarding stack"},
	{"link.Reporter", reflect.TypeFor[link.Reporter](), "stack.Stats (and through it metrics and bench), stacktest, bench"},
	{"link.CacheReporter", reflect.TypeFor[link.CacheReporter](), "embedders and the endpoints' tests"},
	{"link.ErrReporter", reflect.TypeFor[link.ErrReporter](), "embedders and the integration tests"},
}
