package stack

import (
	"reflect"
	"sort"
	"strconv"

	"gvisor.dev/gvisor/pkg/tcpip"

	"github.com/ustack-dev/ustack/link"
	"github.com/ustack-dev/ustack/poll"
	"github.com/ustack-dev/ustack/sched"
)

// Stats is one snapshot of everything a Stack counts.
type Stats struct {
	// GVisor holds every counter of gVisor's tcpip.Stats by its field path,
	// such as "TCP.SegmentsSent" or "UDP.ReceiveBufferErrors".
	GVisor map[string]uint64
	// NICs holds each NIC's counters, in the order the NICs were added.
	NICs []NICStats
	// BusyPoll holds what busy-polling readers did (all zero when
	// Options.BusyPoll is off).
	BusyPoll poll.Stats
}

// NICStats are one NIC's counters.
type NICStats struct {
	ID    tcpip.NICID
	Name  string
	Qdisc string
	// Link holds the link endpoint's own counters when it keeps them
	// (HasLink); every ustack endpoint does.
	Link    link.Stats
	HasLink bool
	// QdiscStats holds the queueing discipline's counters and contention
	// profile when it keeps them (HasQdiscStats): ours do, gVisor's none
	// and fifo do not.
	QdiscStats    sched.Stats
	HasQdiscStats bool
	// DelayedACK holds what the NIC's delayed ACK did (zero when
	// TCPOptions.DelayedACK is off).
	DelayedACK ACKStats
	// GVisor holds gVisor's per-NIC counters (tcpip.NICStats) by field
	// path, such as "Tx.Packets" or "TxPacketsDroppedNoBufferSpace".
	GVisor map[string]uint64
}

// BusyPollStats returns the busy polling counters alone, cheaply (Stats
// also walks every gVisor counter).
func (s *Stack) BusyPollStats() poll.Stats { return s.poller.Stats() }

// Counter returns the gVisor counter at path, or 0 if there is none.
func (st Stats) Counter(path string) uint64 { return st.GVisor[path] }

// NIC returns the counters of the named NIC.
func (st Stats) NIC(name string) (NICStats, bool) {
	for _, n := range st.NICs {
		if n.Name == name {
			return n, true
		}
	}
	return NICStats{}, false
}

// Stats returns a snapshot of the stack's counters. Counters are read one
// by one while traffic flows, so a snapshot is not atomic across them.
func (s *Stack) Stats() Stats {
	st := Stats{GVisor: make(map[string]uint64, 512), BusyPoll: s.poller.Stats()}
	gs := s.s.Stats()
	flatten(reflect.ValueOf(&gs).Elem(), "", st.GVisor)

	s.mu.Lock()
	nics := append([]*nic(nil), s.nics...)
	s.mu.Unlock()
	info := s.s.NICInfo()
	for _, n := range nics {
		ns := NICStats{ID: n.id, Name: n.name, Qdisc: n.qdisc, GVisor: map[string]uint64{}}
		if r, ok := n.ep.(link.Reporter); ok {
			ns.Link, ns.HasLink = r.LinkStats(), true
		}
		if r, ok := n.qd.(sched.Reporter); ok {
			ns.QdiscStats, ns.HasQdiscStats = r.QdiscStats(), true
		}
		if n.ack != nil {
			ns.DelayedACK = n.ack.stats()
		}
		if i, ok := info[n.id]; ok {
			flatten(reflect.ValueOf(&i.Stats).Elem(), "", ns.GVisor)
		}
		st.NICs = append(st.NICs, ns)
	}
	return st
}

var (
	counterPtrType = reflect.TypeFor[*tcpip.StatCounter]()
	counterType    = reflect.TypeFor[tcpip.StatCounter]()
)

// flatten walks a gVisor stats struct and records every StatCounter under
// its dotted field path. Arrays of counters get their index as the last
// path element. Fields of other kinds (maps keyed by protocol number) are
// skipped.
func flatten(v reflect.Value, prefix string, out map[string]uint64) {
	switch {
	case v.Type() == counterPtrType:
		if !v.IsNil() {
			out[prefix] = v.Interface().(*tcpip.StatCounter).Value()
		}
		return
	case v.Type() == counterType:
		if v.CanAddr() {
			out[prefix] = v.Addr().Interface().(*tcpip.StatCounter).Value()
		}
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			flatten(v.Elem(), prefix, out)
		}
	case reflect.Struct:
		t := v.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			name := f.Name
			if f.Anonymous {
				// Embedded stats structs read as Go promotes their fields.
				name = prefix
			} else if prefix != "" {
				name = prefix + "." + f.Name
			}
			flatten(v.Field(i), name, out)
		}
	case reflect.Array:
		for i := range v.Len() {
			flatten(v.Index(i), prefix+"."+strconv.Itoa(i), out)
		}
	}
}

// CounterNames returns the paths of m in sorted order, for stable output.
func CounterNames(m map[string]uint64) []string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// Poller returns the stack's busy poller, for readers outside this package
// (package sandbox's relays) that wait on gVisor endpoints themselves; its
// Wait returns false at once when busy polling is off.
func (s *Stack) Poller() *poll.Poller { return s.poller }
