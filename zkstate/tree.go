package zkstate

import (
	"context"
	"errors"
	"slices"
	"strings"
)

// TreeNode is one znode of a Tree with the data version it had when read.
type TreeNode struct {
	Path    string
	Version int32
}

// Tree reads the znodes under p, p included, with their data versions: children level by level
// (ChildrenMany), then every version (GetMany). Parents come before their children. A znode
// that goes away meanwhile is left out; an absent p is an empty tree. Like a Snapshot it is not
// one transaction: DeleteTreeOps turns it into a delete that holds only if nothing changed.
func (s *Store) Tree(ctx context.Context, p string) ([]TreeNode, error) {
	var all []string
	level := []string{p}
	for len(level) > 0 {
		reads, err := s.ChildrenMany(ctx, level)
		if err != nil {
			return nil, err
		}
		var next []string
		for i, r := range reads {
			switch {
			case errors.Is(r.Err, ErrNoNode):
				continue
			case r.Err != nil:
				return nil, r.Err
			}
			all = append(all, level[i])
			kids := slices.Sorted(slices.Values(r.Children))
			for _, c := range kids {
				next = append(next, joinPath(level[i], c))
			}
		}
		level = next
	}
	if len(all) == 0 {
		return nil, nil
	}
	reads, err := s.GetMany(ctx, all)
	if err != nil {
		return nil, err
	}
	out := make([]TreeNode, 0, len(all))
	for i, r := range reads {
		switch {
		case errors.Is(r.Err, ErrNoNode):
			continue
		case r.Err != nil:
			return nil, r.Err
		}
		out = append(out, TreeNode{Path: all[i], Version: r.Stat.Version})
	}
	return out, nil
}

// DeleteTreeOps deletes the znodes of a Tree in one batch, children before parents, each at
// the version read. As one MultiAtomic it deletes all of them or none: a znode created under
// one of them since the read makes its parent's delete fail (ErrNotEmpty), a write to one of
// them its delete (ErrBadVersion), and one deleted meanwhile its own (ErrNoNode).
func DeleteTreeOps(nodes []TreeNode) []Op {
	sorted := slices.Clone(nodes)
	slices.SortStableFunc(sorted, func(a, b TreeNode) int {
		return strings.Count(b.Path, "/") - strings.Count(a.Path, "/")
	})
	ops := make([]Op, 0, len(sorted))
	for _, n := range sorted {
		ops = append(ops, DeleteOp(n.Path, n.Version))
	}
	return ops
}
