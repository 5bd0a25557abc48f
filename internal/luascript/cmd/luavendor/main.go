// Command luavendor rewrites the library blocks of the Lua scripts in a
// directory (see package luascript): each script that has one gets the
// library's helpers it uses, as luascript.Assemble checks them. Run it
// through go generate after a change to the library file:
//
//	go generate ./internal/shard
//
// Usage: luavendor DIR LIB (LIB is the library file's name in DIR).
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/hourglass-sched/hourglass/internal/luascript"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: luavendor DIR LIB")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "luavendor:", err)
		os.Exit(1)
	}
}

func run(dir, lib string) error {
	libText, err := os.ReadFile(filepath.Join(dir, lib))
	if err != nil {
		return err
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.lua"))
	if err != nil {
		return err
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		if !strings.Contains(string(b), "\n"+luascript.LibEnd) {
			continue
		}
		out, err := luascript.Vendor(string(libText), string(b))
		if err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		if out != string(b) {
			if err := os.WriteFile(f, []byte(out), 0o644); err != nil {
				return err
			}
			fmt.Println("luavendor: rewrote", f)
		}
	}
	return nil
}
