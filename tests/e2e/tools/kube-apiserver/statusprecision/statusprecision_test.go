// Package statusprecision pins a read amplification of the v1.37.2 kubelet to one field.
//
// After a pod's first volume health report, the kubelet reads the pod again at every status
// sync (every 10 s), for as long as the pod lives: `make scale` measures 6 GETs a pod a minute
// after a storm, none before. The status manager sets `volumeHealth[].lastTransitionTime` to
// the nanosecond (`SetPodVolumeHealth`, `metav1.Now()`), its `normalizeStatus` cuts the pod's
// other times to the second but not that one, and the apiserver keeps a time to the second. So
// `needsReconcile` never finds the stored status equal to its copy, and `syncPod` GETs the pod
// (pkg/kubelet/status/status_manager.go: SetPodVolumeHealth, needsReconcile, normalizeStatus).
//
// The test runs the kubelet's own status manager against a fake client twice, with one
// difference: whether the stored `lastTransitionTime` of the volume health entry is cut to the
// second, as the apiserver stores it, or kept to the nanosecond.
package statusprecision

import (
	"context"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2"
	kubepod "k8s.io/kubernetes/pkg/kubelet/pod"
	"k8s.io/kubernetes/pkg/kubelet/status"
)

// The status manager's sync of every pod runs every 10 s (its syncPeriod); one and a bit.
const allSynced = 11 * time.Second

type noRunningContainers struct{}

func (noRunningContainers) PodCouldHaveRunningContainers(*v1.Pod) bool { return false }

type noLatency struct{}

func (noLatency) RecordStatusUpdated(klog.Logger, *v1.Pod) {}
func (noLatency) DeletePodStartupState(types.UID)          {}

// readsAfterFirstReport reports a volume's first health condition through the status manager,
// stores the status as the apiserver would (cutting the entry's time to the second, or not),
// and counts the pod GETs of the next sync of every pod.
func readsAfterFirstReport(t *testing.T, cutToSecond bool) int {
	logger := klog.Background()
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "apps", UID: "uid-web"},
		Spec: v1.PodSpec{
			NodeName:   "node1",
			Containers: []v1.Container{{Name: "app"}},
			Volumes:    []v1.Volume{{Name: "vol"}},
		},
	}
	client := fake.NewClientset(pod)
	pods := kubepod.NewBasicPodManager()
	pods.AddPod(pod)
	manager := status.NewManager(client, pods, noRunningContainers{}, noLatency{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	manager.Start(ctx)

	manager.SetPodStatus(logger, pod, v1.PodStatus{Phase: v1.PodRunning})
	if !manager.SetPodVolumeHealth(logger, pod.UID, "vol", []v1.VolumeHealthCondition{
		{Status: "Degraded", Reason: "DiskSlow", Message: "latency above 100 ms"},
	}) {
		t.Fatal("the first report was not taken")
	}
	written := waitFor(t, func() bool {
		for _, action := range client.Actions() {
			if action.GetVerb() == "patch" && action.GetSubresource() == "status" {
				return true
			}
		}
		return false
	})
	if !written {
		t.Fatal("the status manager never wrote the report")
	}

	// What the kubelet then sees of the pod (its watch): the status it wrote, as stored.
	cached, ok := manager.GetPodStatus(pod.UID)
	if !ok || len(cached.VolumeHealth) != 1 {
		t.Fatalf("no cached volume health: %+v", cached)
	}
	when := cached.VolumeHealth[0].LastTransitionTime
	if when.Time.Nanosecond() == 0 {
		// A report made on the second exactly: the difference cannot show. Rare; try again.
		t.Skip("the report's time has no fraction of a second")
	}
	stored := pod.DeepCopy()
	stored.Status = *cached.DeepCopy()
	if cutToSecond {
		stored.Status.VolumeHealth[0].LastTransitionTime = when.Rfc3339Copy()
	}
	pods.UpdatePod(stored)

	client.ClearActions()
	time.Sleep(allSynced)
	reads := 0
	for _, action := range client.Actions() {
		if action.GetVerb() == "get" && action.GetResource().Resource == "pods" {
			reads++
		}
	}
	return reads
}

func waitFor(t *testing.T, done func() bool) bool {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		if done() {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

func TestOnlyTheVolumeHealthTimesPrecisionMakesTheKubeletReadThePod(t *testing.T) {
	var (
		mu    sync.Mutex
		reads = map[bool]int{}
	)
	t.Run("cases", func(t *testing.T) {
		for _, cut := range []bool{true, false} {
			t.Run(map[bool]string{true: "stored to the second", false: "stored to the nanosecond"}[cut], func(t *testing.T) {
				t.Parallel()
				n := readsAfterFirstReport(t, cut)
				mu.Lock()
				reads[cut] = n
				mu.Unlock()
			})
		}
	})
	if t.Skipped() {
		return
	}
	if reads[true] == 0 {
		t.Errorf("stored to the second, as the apiserver stores it: no pod read in a sync of every pod; the kubelet no longer reads the pod again")
	}
	if reads[false] != 0 {
		t.Errorf("stored to the nanosecond: %d pod reads; something besides that time differs", reads[false])
	}
	t.Logf("pod reads in one sync of every pod: %d with the time stored to the second, %d to the nanosecond", reads[true], reads[false])
}
