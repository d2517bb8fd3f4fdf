// Command ocrraudit audits a running `ocrr serve` with Go's own transparency-log code
// (golang.org/x/mod/sumdb/note and sumdb/tlog), sharing nothing with ocrr:
//
//	ocrraudit <base URL> <token> <index>...
//
// It fetches the verifier key and the checkpoint, verifies the note, reads C2SP tlog-tiles
// (authenticated against the checkpoint by tlog.TileHashReader), recomputes the tree hash,
// and for each index checks the service's inclusion proof of the entry it returns (leaf
// rebuilt from the entry's bytes) and a consistency proof from a smaller tree. It prints
// "ok ..." lines, or the first failure and exits 1.
package main

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

var base, token string

func get(path string, auth bool) []byte {
	req, err := http.NewRequest("GET", base+path, nil)
	check(err)
	if auth {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	check(err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	check(err)
	if resp.StatusCode != 200 {
		fail("GET %s: %d %s", path, resp.StatusCode, body)
	}
	return body
}

func check(err error) {
	if err != nil {
		fail("%v", err)
	}
}

func fail(format string, args ...any) {
	fmt.Printf("FAIL "+format+"\n", args...)
	os.Exit(1)
}

func hash(s string) tlog.Hash {
	raw, err := base64.StdEncoding.DecodeString(s)
	check(err)
	var h tlog.Hash
	if len(raw) != len(h) {
		fail("hash %q is %d bytes", s, len(raw))
	}
	copy(h[:], raw)
	return h
}

// c2spPath is a tile's path as C2SP tlog-tiles spells it: Go's tile/8/L/... without the
// height, and "entries" for Go's "data" level.
func c2spPath(t tlog.Tile) string {
	p := strings.TrimPrefix(t.Path(), fmt.Sprintf("tile/%d/", t.H))
	return "/tile/" + strings.Replace(p, "data/", "entries/", 1)
}

// tiles reads hash tiles over HTTP; tlog.TileHashReader authenticates what they hold.
type tiles struct{}

func (tiles) Height() int { return 8 }

func (tiles) ReadTiles(ts []tlog.Tile) ([][]byte, error) {
	out := make([][]byte, len(ts))
	for i, t := range ts {
		out[i] = get(c2spPath(t), false)
	}
	return out, nil
}

func (tiles) SaveTiles([]tlog.Tile, [][]byte) {}

func main() {
	base, token = os.Args[1], os.Args[2]

	// The signed checkpoint, verified with the service's verifier key.
	vkey := strings.TrimSpace(string(get("/verifier-key", false)))
	verifier, err := note.NewVerifier(vkey)
	check(err)
	n, err := note.Open(get("/checkpoint", false), note.VerifierList(verifier))
	check(err)
	lines := strings.Split(n.Text, "\n")
	if len(lines) < 4 || lines[0] != verifier.Name() {
		fail("checkpoint %q: not <origin>\\n<size>\\n<root>\\n for %s", n.Text, verifier.Name())
	}
	size, err := strconv.ParseInt(lines[1], 10, 64)
	check(err)
	tree := tlog.Tree{N: size, Hash: hash(lines[2])}
	fmt.Printf("ok checkpoint %s size %d root %s\n", lines[0], tree.N, tree.Hash)

	// The tiles: every hash read through them is proven to be in the checkpoint's tree.
	hr := tlog.TileHashReader(tree, tiles{})
	th, err := tlog.TreeHash(tree.N, hr)
	check(err)
	if th != tree.Hash {
		fail("tree hash from tiles %s, checkpoint says %s", th, tree.Hash)
	}
	fmt.Printf("ok tiles give the tree hash\n")

	for _, arg := range os.Args[3:] {
		index, err := strconv.ParseInt(arg, 10, 64)
		check(err)
		var got struct {
			Size     int64    `json:"size"`
			Root     string   `json:"root"`
			LeafHash string   `json:"leaf_hash"`
			Proof    []string `json:"proof"`
			Entry    struct {
				Bytes string `json:"bytes"`
			} `json:"entry"`
		}
		check(json.Unmarshal(get(fmt.Sprintf("/proof/inclusion/%d/entry?size=%d", index, tree.N), true), &got))
		entry, err := base64.StdEncoding.DecodeString(got.Entry.Bytes)
		check(err)
		leaf := tlog.RecordHash(entry) // the leaf, rebuilt from the entry's bytes
		if leaf != hash(got.LeafHash) {
			fail("entry %d: leaf_hash contradicts the entry's bytes (they hash to %s)", index, leaf)
		}
		if got.Size != tree.N || hash(got.Root) != tree.Hash {
			fail("entry %d: size or root differ from the checkpoint", index)
		}
		fromTiles, err := hr.ReadHashes([]int64{tlog.StoredHashIndex(0, index)})
		check(err)
		if fromTiles[0] != leaf {
			fail("entry %d: the level-0 tile holds %s, the entry hashes to %s", index, fromTiles[0], leaf)
		}
		var proof tlog.RecordProof
		for _, p := range got.Proof {
			proof = append(proof, hash(p))
		}
		check(tlog.CheckRecord(proof, tree.N, tree.Hash, index, leaf))
		fmt.Printf("ok entry %d is in the checkpoint's tree (leaf from its %d bytes)\n", index, len(entry))
		// The same proof, built by Go from the tiles. (TileHashReader does not authenticate
		// every tile it reads: a full tile whose parent the tree hash already needed is
		// trusted unchecked, so check what is built from the tiles against the checkpoint.)
		own, err := tlog.ProveRecord(tree.N, index, hr)
		check(err)
		if err := tlog.CheckRecord(own, tree.N, tree.Hash, index, leaf); err != nil {
			fail("entry %d: the proof built from the tiles does not hold: %v", index, err)
		}
		fmt.Printf("ok the proof of entry %d built from the tiles holds\n", index)

		// The tree of index+1 entries is a prefix of the checkpoint's tree.
		old := index + 1
		var cons struct {
			RootFrom string   `json:"root_from"`
			Proof    []string `json:"proof"`
		}
		check(json.Unmarshal(get(fmt.Sprintf("/proof/consistency?from=%d&to=%d", old, tree.N), false), &cons))
		oldHash, err := tlog.TreeHash(old, hr)
		check(err)
		if oldHash != hash(cons.RootFrom) {
			fail("the tree of %d: tiles give %s, the service %s", old, oldHash, cons.RootFrom)
		}
		var tp tlog.TreeProof
		for _, p := range cons.Proof {
			tp = append(tp, hash(p))
		}
		check(tlog.CheckTree(tp, tree.N, tree.Hash, old, oldHash))
		fmt.Printf("ok the tree of %d is consistent with the checkpoint\n", old)
	}

	// The first entry bundle: each entry's bytes hash to the leaf its tile holds.
	w := tree.N
	if w > 256 {
		w = 256
	}
	bundle := get(c2spPath(tlog.Tile{H: 8, L: -1, N: 0, W: int(w)}), true)
	for i := int64(0); i < w; i++ {
		if len(bundle) < 2 || len(bundle) < 2+int(binary.BigEndian.Uint16(bundle)) {
			fail("entry bundle 0 ends early at entry %d", i)
		}
		k := 2 + int(binary.BigEndian.Uint16(bundle))
		leaves, err := hr.ReadHashes([]int64{tlog.StoredHashIndex(0, i)})
		check(err)
		if tlog.RecordHash(bundle[2:k]) != leaves[0] {
			fail("entry bundle 0: entry %d does not hash to its leaf", i)
		}
		bundle = bundle[k:]
	}
	if len(bundle) != 0 {
		fail("entry bundle 0 has %d bytes after its %d entries", len(bundle), w)
	}
	fmt.Printf("ok entry bundle 0 holds the %d entries of its leaves\n", w)
}
