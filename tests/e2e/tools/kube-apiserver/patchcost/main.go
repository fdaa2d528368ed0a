// Command patchcost measures what kube-apiserver pays to apply a mutating webhook's JSON Patch.
//
// It reads a stream of JSON documents from stdin, one per measurement (one per line is the
// usual form, but any whitespace between documents will do):
//
//	{"object": <the object>, "patch": <RFC 6902 array>, "runs": <n>}
//
// For each it applies the patch to the object `runs` times, as the apiserver does, and prints
// one JSON line:
//
//	{"ns_per_apply": ..., "min_ns_per_apply": ..., "bytes_per_apply": ..., "result_bytes": ...,
//	 "result_sha256": "...", "object_bytes": ..., "patch_bytes": ...}
//
// ns_per_apply is the mean wall time of one apply and min_ns_per_apply the fastest one (the
// least disturbed by other work on the machine); bytes_per_apply is runtime.MemStats.TotalAlloc
// over the runs divided by runs. result_sha256 lets two patches be shown to give the same
// object. A patch that does not decode or apply exits with status 1 and says which document.
//
// It is built in this module so that it links the json-patch the pinned k8s.io/apiserver
// requires (gopkg.in/evanphx/json-patch.v4 v4.13.0), not a newer one.
package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"time"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
)

type input struct {
	Object json.RawMessage `json:"object"`
	Patch  json.RawMessage `json:"patch"`
	Runs   int             `json:"runs"`
}

type output struct {
	NsPerApply    int64  `json:"ns_per_apply"`
	MinNsPerApply int64  `json:"min_ns_per_apply"`
	BytesPerApply uint64 `json:"bytes_per_apply"`
	ResultBytes   int    `json:"result_bytes"`
	ResultSha256  string `json:"result_sha256"`
	ObjectBytes   int    `json:"object_bytes"`
	PatchBytes    int    `json:"patch_bytes"`
}

// apply is what kube-apiserver does with a webhook's JSON Patch: k8s.io/apiserver v0.37.2,
// pkg/admission/plugin/webhook/mutating/dispatcher.go, (*mutatingDispatcher).callAttrMutatingHook,
// the admissionv1.PatchTypeJSONPatch case. There the patch is decoded first
// (jsonpatch.DecodePatch(result.Patch)) and applied to the object encoded as JSON
// (patchObj.Apply(objJS)). The decode of patchedJS into the Go type that follows is the same
// for any patch that gives the same object, so it is left out.
func apply(patch, objJS []byte) ([]byte, error) {
	patchObj, err := jsonpatch.DecodePatch(patch)
	if err != nil {
		return nil, fmt.Errorf("received undecodable patch: %w", err)
	}
	if len(patchObj) == 0 {
		return objJS, nil
	}
	patchedJS, err := patchObj.Apply(objJS)
	if err != nil {
		return nil, fmt.Errorf("the patch does not apply: %w", err)
	}
	return patchedJS, nil
}

func measure(in input) (output, error) {
	if len(in.Object) == 0 || len(in.Patch) == 0 {
		return output{}, errors.New(`"object" and "patch" are required`)
	}
	if in.Runs < 1 {
		return output{}, fmt.Errorf(`"runs" must be at least 1, not %d`, in.Runs)
	}
	// The apiserver's JSON serializer writes compact JSON; the object as read may not be.
	var objJS bytes.Buffer
	if err := json.Compact(&objJS, in.Object); err != nil {
		return output{}, err
	}
	patch := []byte(in.Patch)
	// Garbage of the parse is not charged to the runs.
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	var result []byte
	minimum := time.Duration(1<<63 - 1)
	started := time.Now()
	for run := range in.Runs {
		one := time.Now()
		patched, err := apply(patch, objJS.Bytes())
		if err != nil {
			return output{}, err
		}
		minimum = min(minimum, time.Since(one))
		// The first run gives the result: no extra apply, which would double the cost of a
		// slow patch.
		if run == 0 {
			result = patched
		}
	}
	took := time.Since(started)
	runtime.ReadMemStats(&after)
	sum := sha256.Sum256(result)
	return output{
		NsPerApply:    took.Nanoseconds() / int64(in.Runs),
		MinNsPerApply: minimum.Nanoseconds(),
		BytesPerApply: (after.TotalAlloc - before.TotalAlloc) / uint64(in.Runs),
		ResultBytes:   len(result),
		ResultSha256:  hex.EncodeToString(sum[:]),
		ObjectBytes:   objJS.Len(),
		PatchBytes:    len(patch),
	}, nil
}

func main() {
	// What kube-apiserver sets at start (k8s.io/apiserver v0.37.2, pkg/server/config.go: the
	// default JSONPatchMaxCopyBytes, which no flag changes); it bounds only "copy" operations.
	jsonpatch.AccumulatedCopySizeLimit = 3 * 1024 * 1024
	decoder := json.NewDecoder(bufio.NewReader(os.Stdin))
	out := json.NewEncoder(os.Stdout)
	for n := 1; ; n++ {
		var in input
		if err := decoder.Decode(&in); errors.Is(err, io.EOF) {
			if n == 1 {
				fail("no document on stdin")
			}
			return
		} else if err != nil {
			fail(fmt.Sprintf("document %d: %v", n, err))
		}
		result, err := measure(in)
		if err != nil {
			fail(fmt.Sprintf("document %d: %v", n, err))
		}
		if err := out.Encode(result); err != nil {
			fail(err.Error())
		}
	}
}

func fail(message string) {
	fmt.Fprintf(os.Stderr, "patchcost: %s\n", message)
	os.Exit(1)
}
