// Package optionaltest checks that a wrapper endpoint is transparent: for
// every optional interface of optional.Interfaces, that it passes the
// interface through when the wrapped endpoint has it, and answers as an
// endpoint without the feature when the wrapped one lacks it.
package optionaltest

import (
	"errors"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/ustack-dev/ustack/cache"
	"github.com/ustack-dev/ustack/link"
	"github.com/ustack-dev/ustack/link/internal/optional"
	"github.com/ustack-dev/ustack/link/linktest"
	"github.com/ustack-dev/ustack/poll"
	"github.com/ustack-dev/ustack/sched"
)

// Wrap wraps lower in the wrapper under test, which owns lower; it
// registers the wrapper's Close with t.Cleanup.
type Wrap func(t *testing.T, lower stack.LinkEndpoint) stack.LinkEndpoint

// Transparent runs, for every interface of optional.Interfaces, one
// subtest with a wrapped endpoint that has every optional interface
// (linktest.Featured) and one with a wrapped endpoint that has none
// (linktest.Endpoint). The first requires the wrapper to implement the
// interface and to pass its calls and results through; the second, that
// the wrapper either does not implement it or answers as an endpoint
// without the feature (no GSO, nothing polled, no round hooks called,
// zero counters, no error, and a writability signal after a refused
// write all the same). A wrapper with an Unwrap method must return the
// wrapped endpoint from it.
func Transparent(t *testing.T, wrap Wrap) {
	for _, in := range optional.Interfaces {
		p, ok := probes[in.Type]
		require.True(t, ok, "optionaltest has no probe for %s: add one", in.Name)
		t.Run(in.Name, func(t *testing.T) {
			t.Run("present", func(t *testing.T) {
				lower := Featured()
				w := wrap(t, lower)
				require.True(t, reflect.TypeOf(w).Implements(in.Type),
					"%T hides %s, which the endpoint it wraps has (%s looks for it)", w, in.Name, in.FoundBy)
				p.present(t, w, lower)
				if u, ok := w.(interface{ Unwrap() stack.LinkEndpoint }); ok {
					require.Same(t, lower, u.Unwrap())
				}
			})
			t.Run("absent", func(t *testing.T) {
				a := &absent{}
				a.lower = linktest.NewEndpoint(&linktest.Writer{Take: func(n int) int {
					if a.refuse.Load() {
						return 0
					}
					return n
				}})
				w := wrap(t, a.lower)
				if !reflect.TypeOf(w).Implements(in.Type) {
					return // it does not claim what the wrapped endpoint lacks
				}
				p.absent(t, w, a)
			})
		})
	}
}

// Featured returns the endpoint with every optional interface that the
// present subtests wrap, each with a value that is not its zero.
func Featured() *linktest.Featured {
	f := linktest.NewFeatured(nil)
	v := reflect.ValueOf(&f.Stats).Elem()
	for i := range v.NumField() {
		v.Field(i).SetUint(uint64(100 + i)) // every counter distinct
	}
	f.Cache = cache.Stats{Hits: 5, Misses: 6, Returns: 7}
	f.GSOMax, f.GSO = 65536, stack.HostGSOSupported
	f.Error = errors.New("device gone")
	f.PollRound = 3
	return f
}

// absent is the wrapped endpoint of the absent subtests: no optional
// interface, and writes refused while refuse is set.
type absent struct {
	lower  *linktest.Endpoint
	refuse atomic.Bool
}

// probe exercises one interface on a wrapper w (which implements it).
type probe struct {
	present func(t *testing.T, w any, lower *linktest.Featured)
	absent  func(t *testing.T, w any, a *absent)
}

// ProbedTypes returns the interface types Transparent has probes for.
func ProbedTypes() []reflect.Type {
	var ts []reflect.Type
	for t := range probes {
		ts = append(ts, t)
	}
	return ts
}

var probes = map[reflect.Type]probe{
	reflect.TypeFor[poll.Source](): {
		present: func(t *testing.T, w any, lower *linktest.Featured) {
			s := w.(poll.Source)
			s.BusyPollBegin()
			require.Equal(t, lower.PollRound, s.BusyPoll())
			require.True(t, s.BusyPollWatchdog())
			s.BusyPollEnd()
			for _, m := range []string{"BusyPollBegin", "BusyPoll", "BusyPollWatchdog", "BusyPollEnd"} {
				require.Equal(t, 1, lower.Calls(m), "%s reached the wrapped endpoint", m)
			}
		},
		absent: func(t *testing.T, w any, _ *absent) {
			s := w.(poll.Source)
			s.BusyPollBegin()
			require.Zero(t, s.BusyPoll(), "nothing to poll")
			require.False(t, s.BusyPollWatchdog(), "nobody polls")
			s.BusyPollEnd()
		},
	},
	reflect.TypeFor[sched.WritableNotifier](): {
		present: func(t *testing.T, w any, lower *linktest.Featured) {
			var signalled atomic.Bool
			w.(sched.WritableNotifier).NotifyWritable(func() { signalled.Store(true) })
			require.True(t, lower.Writable(), "the callback reached the wrapped endpoint")
			require.True(t, signalled.Load())
		},
		absent: func(t *testing.T, w any, a *absent) {
			// A discipline that finds the signal waits for it: it must come
			// after a refused write even though the wrapped endpoint has none.
			signal := make(chan struct{}, 1)
			w.(sched.WritableNotifier).NotifyWritable(func() {
				select {
				case signal <- struct{}{}:
				default:
				}
			})
			ep := w.(stack.LinkEndpoint)
			a.refuse.Store(true)
			require.Zero(t, writeOne(ep), "the wrapped endpoint refuses")
			select {
			case <-signal:
			case <-time.After(linktest.WaitTimeout):
				t.Fatal("no writability signal after a refused write")
			}
			a.refuse.Store(false)
			require.Equal(t, 1, writeOne(ep))
		},
	},
	reflect.TypeFor[sched.RoundNotifier](): {
		present: func(t *testing.T, w any, lower *linktest.Featured) {
			var begins, ends int
			w.(sched.RoundNotifier).NotifyRounds(func() { begins++ }, func() { ends++ })
			require.Equal(t, 1, lower.Calls("NotifyRounds"))
			sink := linktest.NewSink()
			w.(stack.LinkEndpoint).Attach(sink)
			require.True(t, lower.Round(func() { lower.Inject(ipv4Packet) }), "the hooks reached the wrapped endpoint")
			require.Equal(t, []int{1, 1}, []int{begins, ends})
			require.Equal(t, 1, sink.Len(), "the round's packet went through the wrapper")
		},
		absent: func(t *testing.T, w any, a *absent) {
			var calls atomic.Int32
			w.(sched.RoundNotifier).NotifyRounds(func() { calls.Add(1) }, func() { calls.Add(1) })
			sink := linktest.NewSink()
			w.(stack.LinkEndpoint).Attach(sink)
			require.True(t, a.lower.Inject(ipv4Packet))
			require.Equal(t, 1, sink.Len())
			require.Zero(t, calls.Load(), "no receive rounds, no hooks called")
		},
	},
	reflect.TypeFor[stack.GSOEndpoint](): {
		present: func(t *testing.T, w any, lower *linktest.Featured) {
			g := w.(stack.GSOEndpoint)
			require.Equal(t, lower.GSOMax, g.GSOMaxSize())
			require.Equal(t, lower.GSO, g.SupportedGSO())
		},
		absent: func(t *testing.T, w any, _ *absent) {
			g := w.(stack.GSOEndpoint)
			require.Zero(t, g.GSOMaxSize())
			require.Equal(t, stack.GSONotSupported, g.SupportedGSO())
		},
	},
	reflect.TypeFor[link.Coalescer](): {
		present: func(t *testing.T, w any, lower *linktest.Featured) {
			c := w.(link.Coalescer)
			c.SetCoalescing(false)
			require.False(t, lower.Coalescing.Load(), "the call reached the wrapped endpoint")
			c.SetCoalescing(true)
			require.True(t, lower.Coalescing.Load())
		},
		absent: func(t *testing.T, w any, _ *absent) {
			w.(link.Coalescer).SetCoalescing(false) // nothing to turn off, nothing to break
		},
	},
	reflect.TypeFor[link.Reporter](): {
		present: func(t *testing.T, w any, lower *linktest.Featured) {
			require.Equal(t, lower.Stats, w.(link.Reporter).LinkStats(), "every counter of the wrapped endpoint")
		},
		absent: func(t *testing.T, w any, _ *absent) {
			require.Zero(t, w.(link.Reporter).LinkStats(), "no counters, nothing done")
		},
	},
	reflect.TypeFor[link.CacheReporter](): {
		present: func(t *testing.T, w any, lower *linktest.Featured) {
			require.Equal(t, lower.Cache, w.(link.CacheReporter).CacheStats())
		},
		absent: func(t *testing.T, w any, _ *absent) {
			require.Zero(t, w.(link.CacheReporter).CacheStats())
		},
	},
	reflect.TypeFor[link.ErrReporter](): {
		present: func(t *testing.T, w any, lower *linktest.Featured) {
			require.ErrorIs(t, w.(link.ErrReporter).Err(), lower.Error)
		},
		absent: func(t *testing.T, w any, _ *absent) {
			require.NoError(t, w.(link.ErrReporter).Err())
		},
	},
}

// ipv4Packet is a minimal IPv4 header, what the probes deliver and send.
var ipv4Packet = []byte{0x45, 0, 0, 20, 0, 0, 0, 0, 64, 17, 0, 0, 198, 18, 0, 1, 198, 18, 0, 2}

// writeOne writes one packet through ep and returns how many it took.
func writeOne(ep stack.LinkEndpoint) int {
	pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(ipv4Packet)})
	defer pkt.DecRef()
	pkt.NetworkProtocolNumber = header.IPv4ProtocolNumber
	var l stack.PacketBufferList
	l.PushBack(pkt)
	n, _ := ep.WritePackets(l)
	return n
}
