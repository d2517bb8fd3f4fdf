// Command cosign checks ocrr's witness cosignatures with the Go reference of
// c2sp.org/tlog-cosignature (github.com/transparency-dev/formats/note), sharing nothing with ocrr:
//
//	cosign verify <note file> <log vkey> <witness vkey>
//	    opens the cosigned checkpoint with golang.org/x/mod/sumdb/note, trusting the log's key and
//	    the witness's (note.NewVerifierForCosignatureV1), and prints "ok <cosignature timestamp>".
//	cosign sign <note file> <witness name>
//	    makes a key with note.GenerateKey and cosigns the checkpoint's body with
//	    note.NewSignerForCosignatureV1; prints the witness's vkey, then its cosignature line.
//
// Any failure is printed and exits 1.
package main

import (
	"crypto/rand"
	"fmt"
	"os"
	"strings"

	tcnote "github.com/transparency-dev/formats/note"
	"golang.org/x/mod/sumdb/note"
)

func check(err error) {
	if err != nil {
		fmt.Println("FAILED:", err)
		os.Exit(1)
	}
}

func main() {
	if len(os.Args) != 5 && len(os.Args) != 4 {
		check(fmt.Errorf("usage: cosign verify NOTE LOGVKEY WITNESSVKEY | cosign sign NOTE NAME"))
	}
	msg, err := os.ReadFile(os.Args[2])
	check(err)
	switch os.Args[1] {
	case "verify":
		logKey, err := note.NewVerifier(os.Args[3])
		check(err)
		witness, err := tcnote.NewVerifierForCosignatureV1(os.Args[4])
		check(err)
		n, err := note.Open(msg, note.VerifierList(logKey, witness))
		check(err)
		for _, sig := range n.Sigs {
			if sig.Hash == witness.KeyHash() && sig.Name == witness.Name() {
				t, err := tcnote.CoSigV1Timestamp(sig)
				check(err)
				fmt.Println("ok", t.Unix())
				return
			}
		}
		check(fmt.Errorf("the witness's cosignature was not among the verified signatures"))
	case "sign":
		skey, vkey, err := note.GenerateKey(rand.Reader, os.Args[3])
		check(err)
		signer, err := tcnote.NewSignerForCosignatureV1(skey)
		check(err)
		text := string(msg)[:strings.Index(string(msg), "\n\n")+1] // the checkpoint's body
		signed, err := note.Sign(&note.Note{Text: text}, signer)
		check(err)
		fmt.Println(vkey)
		fmt.Print(string(signed)[len(text)+1:]) // the cosignature line
	default:
		check(fmt.Errorf("unknown command %q", os.Args[1]))
	}
}
