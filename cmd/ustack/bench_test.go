package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestBenchCache(t *testing.T) {
	code, out, errs := runCmd("bench", "-json", "-test", "tcp_rr", "-qdisc", "none", "-senders", "1", "-cache", "off,on",
		"-duration", "50ms", "-count", "1")
	require.Equal(t, 0, code, errs)
	var doc struct {
		Results []struct {
			Cache      string  `json:"cache"`
			TPS        float64 `json:"tps"`
			PeakRSSMiB float64 `json:"peak_rss_mib"`
		} `json:"results"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &doc))
	require.Len(t, doc.Results, 2)
	require.Equal(t, "off", doc.Results[0].Cache)
	require.Equal(t, "on", doc.Results[1].Cache)
	for _, r := range doc.Results {
		require.Positive(t, r.TPS)
		require.GreaterOrEqual(t, r.PeakRSSMiB, 0.0)
	}

	code, out, _ = runCmd("bench", "-test", "tcp_rr", "-qdisc", "none", "-senders", "1", "-cache", "on,off", "-duration", "20ms", "-count", "1")
	require.Equal(t, 0, code)
	require.Contains(t, out, "cache")
	require.Contains(t, out, "rss_MiB")

	for _, bad := range []string{"maybe", ""} {
		code, _, errs = runCmd("bench", "-cache", bad)
		require.Equal(t, 2, code, bad)
		require.Contains(t, errs, "-cache", bad)
	}
}
