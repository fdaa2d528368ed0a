// Package conditioncost measures what the shipped repair entries' matchConditions cost
// kube-apiserver v1.37.2 on every status write they match, with the apiserver's own code: the
// object and the old object converted to v1 (NewVersionedAttributes, done only because an
// entry has conditions), the conditions compiled and evaluated as the webhook dispatcher does.
//
// The apiserver evaluates every condition of an entry on every write its rules match,
// whether or not the gated field changed; each entry therefore has one condition that tests
// the change first (CEL stops at the first false), and sizes before anything quadratic.
// TestCostIsLinearInTheReport fails when a report eight times as large costs much more than
// eight times as much, for unchanged writes, valid first reports and reports to repair.
package conditioncost

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/webhook"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/cel/environment"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	api "k8s.io/kubernetes/pkg/apis/core"
	_ "k8s.io/kubernetes/pkg/apis/core/install"
	storage "k8s.io/kubernetes/pkg/apis/storage"
	_ "k8s.io/kubernetes/pkg/apis/storage/install"
	"sigs.k8s.io/yaml"
)

func repository() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "../../../../..")
}

// The repair entries of manifests/base, by name.
func entries(t testing.TB) map[string]admissionregistrationv1.MutatingWebhook {
	data, err := os.ReadFile(filepath.Join(repository(), "manifests/base/mutatingwebhookconfiguration.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var config admissionregistrationv1.MutatingWebhookConfiguration
	if err := yaml.Unmarshal(data, &config); err != nil {
		t.Fatal(err)
	}
	byName := map[string]admissionregistrationv1.MutatingWebhook{}
	for _, hook := range config.Webhooks {
		byName[hook.Name] = hook
	}
	return byName
}

// A report's shape: none, n valid entries (or conditions), or n with the last two the same.
type shape int

const (
	none shape = iota
	valid
	// Valid, with another message: a report that changed.
	again
	duplicate
)

func message(s shape) string {
	if s == again {
		return "latency above 200 ms"
	}
	return "latency above 100 ms"
}

func reason(i int) string { return fmt.Sprintf("Reason%d", i) }

// A duplicate needs two entries.
func entriesOf(n int, s shape) int {
	if s == duplicate {
		return max(n, 2)
	}
	return n
}

// A pod as a kubelet keeps it, with n CSI volumes and a health entry for each.
func pod(n int, s shape) kruntime.Object {
	n = entriesOf(n, s)
	p := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: "apps", UID: "uid",
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet", Operation: "Update",
				APIVersion: "v1", FieldsType: "FieldsV1", Subresource: "status",
				FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:status":{"f:conditions":{},"f:phase":{}}}`)}}}},
		Spec: v1.PodSpec{NodeName: "node-1", Containers: []v1.Container{{Name: "web", Image: "nginx"}}},
		Status: v1.PodStatus{Phase: v1.PodRunning,
			Conditions:        []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionTrue}},
			ContainerStatuses: []v1.ContainerStatus{{Name: "web", Ready: true, Image: "nginx"}}},
	}
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("vol%d", i)
		p.Spec.Volumes = append(p.Spec.Volumes, v1.Volume{Name: name, VolumeSource: v1.VolumeSource{
			PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: name}}})
		if s == none {
			continue
		}
		if s == duplicate && i == n-1 {
			name = fmt.Sprintf("vol%d", i-1)
		}
		p.Status.VolumeHealth = append(p.Status.VolumeHealth, v1.PodVolumeHealth{Name: name,
			HealthConditions: []v1.VolumeHealthCondition{{Status: "Degraded", Reason: "SlowIO", Message: message(s)}}})
	}
	out := &api.Pod{}
	must(legacyscheme.Scheme.Convert(p, out, nil))
	return out
}

// A claim with n conditions in its health status.
func claim(n int, s shape) kruntime.Object {
	n = entriesOf(n, s)
	c := &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: "apps", UID: "uid"},
		Spec: v1.PersistentVolumeClaimSpec{AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			VolumeName: "pv-data"},
		Status: v1.PersistentVolumeClaimStatus{Phase: v1.ClaimBound},
	}
	if s != none {
		c.Status.HealthStatus = &v1.VolumeHealthStatus{}
		for i := 0; i < n; i++ {
			r := reason(i)
			if s == duplicate && i == n-1 {
				r = reason(i - 1)
			}
			c.Status.HealthStatus.HealthConditions = append(c.Status.HealthStatus.HealthConditions,
				v1.VolumeHealthCondition{Status: "Degraded", Reason: r, Message: message(s)})
		}
	}
	out := &api.PersistentVolumeClaim{}
	must(legacyscheme.Scheme.Convert(c, out, nil))
	return out
}

// A CSINode with n drivers, each reporting a condition.
func csiNode(n int, s shape) kruntime.Object {
	n = entriesOf(n, s)
	c := &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: "node-1", UID: "uid"}}
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("csi%d.example.com", i)
		c.Spec.Drivers = append(c.Spec.Drivers, storagev1.CSINodeDriver{Name: name, NodeID: "node-1"})
		if s == none {
			continue
		}
		if s == duplicate && i == n-1 {
			name = fmt.Sprintf("csi%d.example.com", i-1)
		}
		c.Status.StorageHealth = append(c.Status.StorageHealth, storagev1.StorageHealth{Name: name,
			HealthConditions: []storagev1.StorageHealthCondition{{Status: "StorageDegraded", Reason: "PoolSlow", Message: message(s)}}})
	}
	out := &storage.CSINode{}
	must(legacyscheme.Scheme.Convert(c, out, nil))
	return out
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}

type resource struct {
	entry  string
	gvr    schema.GroupVersionResource
	gvk    schema.GroupVersionKind
	object func(n int, s shape) kruntime.Object
	// Beyond this size the entry sends a changed report without looking into it.
	guard int
}

var resources = []resource{
	{"pod-status.repair.volume-health.github.io", schema.GroupVersionResource{Version: "v1", Resource: "pods"},
		schema.GroupVersionKind{Version: "v1", Kind: "Pod"}, pod, 16},
	{"pvc.repair.volume-health.github.io", schema.GroupVersionResource{Version: "v1", Resource: "persistentvolumeclaims"},
		schema.GroupVersionKind{Version: "v1", Kind: "PersistentVolumeClaim"}, claim, 16},
	{"csinode.repair.volume-health.github.io", schema.GroupVersionResource{Group: "storage.k8s.io", Version: "v1", Resource: "csinodes"},
		schema.GroupVersionKind{Group: "storage.k8s.io", Version: "v1", Kind: "CSINode"}, csiNode, 16},
}

// A write of the status: old and new, what the entry should answer.
type write struct {
	what     string
	old, new shape
}

var writes = []write{
	{"unchanged", valid, valid},
	{"first report", none, valid},
	{"changed", valid, again},
	{"a duplicate, last", none, duplicate},
}

// nsPerWrite is the fastest of five batches: the one least disturbed by other work.
func nsPerWrite(t *testing.T, r resource, w write, n int) (float64, bool) {
	hook := entries(t)[r.entry]
	accessor := webhook.NewMutatingWebhookAccessor("uid", "volume-health", &hook)
	compiler := cel.NewConditionCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
	matcher := accessor.GetCompiledMatcher(compiler)
	o := admission.NewObjectInterfacesFromScheme(legacyscheme.Scheme)
	namespace := "apps"
	if r.gvk.Kind == "CSINode" {
		namespace = ""
	}
	attr := admission.NewAttributesRecord(r.object(n, w.new), r.object(n, w.old), r.gvk.GroupKind().WithVersion(""),
		namespace, "name", r.gvr, "status", admission.Update, &metav1.UpdateOptions{}, false,
		&user.DefaultInfo{Name: "system:node:node-1", Groups: []string{"system:nodes"}})
	ctx := context.Background()
	matches := false
	once := func() {
		versioned, err := admission.NewVersionedAttributes(attr, r.gvk, o)
		if err != nil {
			t.Fatal(err)
		}
		result := matcher.Match(ctx, versioned, nil, nil)
		if result.Error != nil {
			t.Fatalf("%s, %s, %d: %v", r.entry, w.what, n, result.Error)
		}
		matches = result.Matches
	}
	once()
	// Runs for about 20 ms a batch.
	start := time.Now()
	once()
	runs := int(20*time.Millisecond/max(time.Since(start), time.Microsecond)) + 1
	best := time.Duration(1 << 62)
	for batch := 0; batch < 5; batch++ {
		start := time.Now()
		for i := 0; i < runs; i++ {
			once()
		}
		best = min(best, time.Since(start)/time.Duration(runs))
	}
	return float64(best.Nanoseconds()), matches
}

func TestCostIsLinearInTheReport(t *testing.T) {
	const small, large = 64, 512
	sizes := []int{1, 8, 16, small, large}
	table := "| entry | write | 1 | 8 | 16 | 64 | 512 |\n|---|---|---|---|---|---|---|\n"
	for _, r := range resources {
		for _, w := range writes {
			var cost []float64
			for _, n := range sizes {
				ns, sent := nsPerWrite(t, r, w, n)
				cost = append(cost, ns)
				// Within the size test, a valid report stays; beyond it a changed one is sent.
				want := w.old != w.new && (w.new == duplicate || n > r.guard)
				if sent != want {
					t.Errorf("%s, %s of %d: sent %v, want %v", r.entry, w.what, n, sent, want)
				}
			}
			table += fmt.Sprintf("| %s | %s | %.0f | %.0f | %.0f | %.0f | %.0f |\n",
				strings.SplitN(r.entry, ".", 2)[0], w.what, cost[0]/1000, cost[1]/1000, cost[2]/1000, cost[3]/1000, cost[4]/1000)
			// Linear is 8x; quadratic 64x. Twice linear leaves room for a noisy machine.
			if ratio := cost[4] / cost[3]; ratio > 2*large/small {
				t.Errorf("%s, %s: %d entries cost %.1fx what %d cost", r.entry, w.what, large, ratio, small)
			}
		}
	}
	fmt.Print(table)
	if os.Getenv("VOLUME_HEALTH_E2E_WRITE_DOCS") != "" && !t.Failed() {
		writeDocs(t, table)
	}
}

// writeDocs puts the table into docs/benchmarks.md, between its condition cost markers.
func writeDocs(t *testing.T, table string) {
	path := filepath.Join(repository(), "docs/benchmarks.md")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	begin, end := "<!-- condition cost: begin -->\n", "<!-- condition cost: end -->"
	a, b := strings.Index(text, begin), strings.Index(text, end)
	if a < 0 || b < a {
		t.Fatalf("docs/benchmarks.md has no %q … %q", begin, end)
	}
	text = text[:a+len(begin)] + table + text[b:]
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}
