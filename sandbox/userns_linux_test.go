package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestUsernsMapFallback checks the choice of a new user namespace's
// mapping against fake newuidmap/newgidmap and subordinate id files:
// auto where all exist, self otherwise, with a note naming what is
// missing only when auto was asked for.
func TestUsernsMapFallback(t *testing.T) {
	tools := t.TempDir()
	for _, n := range []string{"newuidmap", "newgidmap"} {
		if err := os.WriteFile(filepath.Join(tools, n), []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	noTools := t.TempDir()
	files := t.TempDir()
	subuid, subgid := filepath.Join(files, "subuid"), filepath.Join(files, "subgid")
	old := subIDFiles
	subIDFiles = [2]string{subuid, subgid}
	t.Cleanup(func() { subIDFiles = old })
	withRange := func(id int) string { return fmt.Sprintf("other:100000:65536\n%d:200000:65536\n", id) }

	for _, tc := range []struct {
		name           string
		path           string
		subuid, subgid string // "" for no file
		asked          string
		mode, note     string // note: a part of it, "" for none
	}{
		{"all there", tools, withRange(os.Getuid()), withRange(os.Getgid()), UsernsMapAuto, UsernsMapAuto, ""},
		{"all there, default", tools, withRange(os.Getuid()), withRange(os.Getgid()), "", UsernsMapAuto, ""},
		{"self asked", tools, withRange(os.Getuid()), withRange(os.Getgid()), UsernsMapSelf, UsernsMapSelf, ""},
		{"no newuidmap", noTools, withRange(os.Getuid()), withRange(os.Getgid()), UsernsMapAuto, UsernsMapSelf, "newuidmap is not installed (package uidmap)"},
		{"no newuidmap, default", noTools, withRange(os.Getuid()), withRange(os.Getgid()), "", UsernsMapSelf, ""},
		{"no subuid range", tools, "other:100000:65536\n", withRange(os.Getgid()), UsernsMapAuto, UsernsMapSelf, subuid + " has no range for"},
		{"no subgid file", tools, withRange(os.Getuid()), "", UsernsMapAuto, UsernsMapSelf, subgid + ": open"},
		{"empty range", tools, fmt.Sprintf("%d:200000:0\n", os.Getuid()), withRange(os.Getgid()), UsernsMapAuto, UsernsMapSelf, "has no range"},
		{"no subuid range, default", tools, "", "", "", UsernsMapSelf, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("PATH", tc.path)
			for f, body := range map[string]string{subuid: tc.subuid, subgid: tc.subgid} {
				os.Remove(f)
				if body != "" {
					if err := os.WriteFile(f, []byte(body), 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			mode, note := usernsMap(tc.asked)
			if mode != tc.mode {
				t.Errorf("mode %q, want %q (note %q)", mode, tc.mode, note)
			}
			switch {
			case tc.note == "" && note != "":
				t.Errorf("note %q, want none", note)
			case tc.note != "" && !strings.Contains(note, tc.note):
				t.Errorf("note %q, want it to say %q", note, tc.note)
			case tc.note != "" && !strings.Contains(note, "mapping only your uid and gid"):
				t.Errorf("note %q does not say what is mapped instead", note)
			}
		})
	}
}
