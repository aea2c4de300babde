// Package netnstest gives a test network namespaces (internal/netns) that
// are deleted when the test ends, and fails the test when one cannot be:
// a namespace left behind keeps its interfaces and name, and a later
// test, or CI's check that none is left, would fail on it far from the
// cause. Tests take their namespaces from here rather than calling
// netns.New and ignoring Close's error.
package netnstest
