//go:build !race

package wgnet_test

// transferSize is what each direction carries in the transfer tests.
const transferSize = 64 << 20
