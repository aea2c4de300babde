package serve

import (
	"io"
	"math/rand/v2"
)

// patternSeed seeds the deterministic byte stream of /bytes/N: any client
// can regenerate it with Pattern to check what it received.
var patternSeed = [32]byte{'u', 's', 't', 'a', 'c', 'k'}

// Pattern returns a reader of the first n bytes of the stream /bytes/N
// serves: ChaCha8 from a fixed seed, fast enough not to limit a transfer.
func Pattern(n int64) io.Reader {
	return &pattern{rng: rand.NewChaCha8(patternSeed), left: n}
}

type pattern struct {
	rng  *rand.ChaCha8
	left int64
}

func (p *pattern) Read(b []byte) (int, error) {
	if p.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(b)) > p.left {
		b = b[:p.left]
	}
	n, _ := p.rng.Read(b)
	p.left -= int64(n)
	return n, nil
}
