package shard

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// reshardAPI names what only code that deals with a change of the shard
// count itself uses: the layout record and its states, a change's steps,
// markers, outboxes and hand-overs, and the errors of an id on its way.
// Code that places or looks up ids uses Layout.ShardOf, Span, Homes and
// the Store's operations by id, which are correct in every state of a
// change by construction (locate.go).
var reshardAPI = map[string]bool{
	"Resharding": true, "From": true, "Gen": true, "oldShardOf": true,
	"ReadLayout": true, "RefreshLayout": true, "SetLayout": true, "LayoutRecord": true,
	"LayoutStable": true, "LayoutPreparing": true, "LayoutResharding": true,
	"BeginResize": true, "ShardDone": true, "AddMoved": true,
	"ScanIDs": true, "Export": true, "Import": true, "Commit": true, "Unimport": true, "Forget": true,
	"CancelledOnTheWay": true, "DropShard": true, "ShardEmpty": true,
	"HandOff": true, "Adopt": true, "HandOverSchedules": true, "TakeOverSchedules": true,
	"Outbox": true, "Cancelled": true, "Imported": true, "Marker": true, "Record": true,
	"ErrInTransit": true, "ErrLayoutChanged": true, "ErrStaleLayout": true, "ErrResizeRunning": true,
	"PreparingGrace": true,
}

// reshardAware lists the files outside internal/shard and internal/reshard
// allowed to use reshardAPI: the resize's own administration (the API and
// the CLI verb) and the scheduler's reaction to a new layout (its
// election's span, the reshard loops, the layout gauges).
var reshardAware = []string{
	"cmd/hourglass/resize.go",
	"inspect/layout.go",
	"internal/scheduler/layout.go",
}

// TestReshardingStaysInItsPackages: where an id lives during a change of
// the shard count is answered in internal/shard (the locator) and the
// change itself runs in internal/reshard; besides them, at most the three
// files of reshardAware know that a change may be running. A new
// operation by id that reaches for the old shard, an outbox or the layout
// record by hand fails this test: write it against the locator instead.
func TestReshardingStaysInItsPackages(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	uses := map[string][]string{} // file -> names used
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			switch {
			case rel != "." && strings.HasPrefix(d.Name(), "."),
				rel == "bench", rel == "deploy", // modules of their own
				rel == "internal/shard", rel == "internal/reshard",
				rel == "internal/testenv", rel == "internal/shardtest":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		shardName := ""
		for _, imp := range f.Imports {
			if strings.HasSuffix(imp.Path.Value, `/internal/shard"`) {
				shardName = "shard"
				if imp.Name != nil {
					shardName = imp.Name.Name
				}
			}
		}
		if shardName == "" {
			return nil // names of other packages are not ours
		}
		names := map[string]bool{}
		ast.Inspect(f, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok && reshardAPI[sel.Sel.Name] {
				names[sel.Sel.Name] = true
			}
			return true
		})
		if len(names) > 0 {
			uses[rel] = slices.Sorted(maps.Keys(names))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(uses) == 0 {
		t.Fatal("no file uses the resharding API: the walk found nothing (wrong root?)")
	}
	for file, names := range uses {
		if !slices.Contains(reshardAware, file) {
			t.Errorf("%s uses %v: only internal/shard, internal/reshard and %v may know that the shard count can change", file, names, reshardAware)
		}
	}
	if len(reshardAware) > 3 {
		t.Errorf("%d resharding-aware files outside internal/shard and internal/reshard; the aim is at most three", len(reshardAware))
	}
}
