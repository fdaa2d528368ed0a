// Command hollowkubelet runs the v1.37.2 kubelet as kubemark's hollow node does (the real volume
// manager, CSI plugin, plugin watcher, volume health manager, status manager and CSINode
// manager; a fake container runtime, mounter and cadvisor), with what the e2e suite needs and
// stock kubemark cannot give it:
//
//   - the CSIVolumeHealth gate on (kubemark has no --feature-gates, and the gate is alpha);
//   - a health probe period of the test's choice (kubemark fixes VolumeStatsAggPeriod at 1m);
//   - a pod resync period of the test's choice (kubemark fixes SyncFrequency at 10s, a real
//     kubelet defaults to 1m): each pod sync GETs the pod's claims and volumes again
//     (WaitForAttachAndMount reprocesses the pod), which at 100 nodes is most of the
//     apiserver's load;
//   - every file under a root directory of the test's choice, kept short because Unix socket
//     paths must stay under 108 bytes;
//   - no kubelet server and no healthz port (nothing listens on the network), the fake image
//     service, and node IP 127.0.0.1 (no DNS lookup of the node's name).
//
// It needs no container runtime, cgroups or mounts. The kubeconfig names the node's identity
// (system:node:<name> in system:nodes), so that the Node authorizer and NodeRestriction apply.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	remote "k8s.io/cri-client/pkg"
	fakeremote "k8s.io/cri-client/pkg/fake"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/cmd/kubelet/app/options"
	"k8s.io/kubernetes/pkg/features"
	kubeletconfig "k8s.io/kubernetes/pkg/kubelet/apis/config"
	cadvisortest "k8s.io/kubernetes/pkg/kubelet/cadvisor/testing"
	"k8s.io/kubernetes/pkg/kubelet/cm"
	kubetypes "k8s.io/kubernetes/pkg/kubelet/types"
	"k8s.io/kubernetes/pkg/kubemark"
)

func main() {
	var (
		kubeconfig, nodeName, root string
		probe, resync              time.Duration
	)
	klog.InitFlags(nil)
	flag.StringVar(&kubeconfig, "kubeconfig", "", "the node's kubeconfig")
	flag.StringVar(&nodeName, "name", "", "the node's name")
	flag.StringVar(&root, "root-dir", "", "the kubelet's root directory (short: sockets live under it)")
	flag.DurationVar(&probe, "probe-period", time.Second, "how often volume and storage health are probed (VolumeStatsAggPeriod)")
	flag.DurationVar(&resync, "sync-frequency", 10*time.Second, "how often every pod is synced (SyncFrequency; kubemark's 10s by default)")
	flag.Parse()
	if kubeconfig == "" || nodeName == "" || root == "" {
		fmt.Fprintln(os.Stderr, "hollowkubelet: --kubeconfig, --name and --root-dir are required")
		os.Exit(2)
	}
	if err := run(kubeconfig, nodeName, root, probe, resync); err != nil {
		fmt.Fprintf(os.Stderr, "hollowkubelet: %v\n", err)
		os.Exit(1)
	}
}

func run(kubeconfig, nodeName, root string, probe, resync time.Duration) error {
	// The volume manager creates the health manager only with the gate on, and reads it when
	// it is built: set it first.
	if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(map[string]bool{string(features.CSIVolumeHealth): true}); err != nil {
		return fmt.Errorf("feature gate: %w", err)
	}
	root, err := filepath.Abs(root)
	if err != nil {
		return err
	}
	for _, dir := range []string{"static-pods", "pod-logs"} {
		if err := os.MkdirAll(filepath.Join(root, dir), 0o750); err != nil {
			return err
		}
	}

	clientConfig, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	clientConfig.UserAgent = "kubelet/v1.37.2 (hollow)"
	clientConfig.ContentType = "application/vnd.kubernetes.protobuf"
	clientConfig.QPS, clientConfig.Burst = 50, 100
	client, err := clientset.NewForConfig(clientConfig)
	if err != nil {
		return err
	}
	flags, config, err := configuration(nodeName, root, probe, resync)
	if err != nil {
		return err
	}
	heartbeatConfig := *clientConfig
	heartbeatConfig.Timeout = config.NodeStatusUpdateFrequency.Duration
	heartbeatConfig.QPS = -1
	heartbeatClient, err := clientset.NewForConfig(&heartbeatConfig)
	if err != nil {
		return err
	}

	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	// The fake container runtime, on a socket under the root directory (kubemark's goes to /tmp).
	endpoint := "unix://" + filepath.Join(root, "cri.sock")
	runtime := fakeremote.NewFakeRemoteRuntime()
	if err := runtime.Start(endpoint); err != nil {
		return fmt.Errorf("fake runtime: %w", err)
	}
	defer runtime.Stop()
	runtimeService, err := remote.NewRemoteRuntimeServiceBuilder().
		WithEndpoint(endpoint).
		WithConnectionTimeout(15 * time.Second).
		Build(ctx)
	if err != nil {
		return fmt.Errorf("runtime service: %w", err)
	}

	kubelet := kubemark.NewHollowKubelet(flags, config, client, heartbeatClient,
		&cadvisortest.Fake{NodeName: nodeName}, runtime.ImageService, runtimeService,
		cm.NewStubContainerManager())
	go kubelet.Run(ctx)
	<-ctx.Done()
	return nil
}

// configuration is kubemark's GetHollowKubeletConfig with the changes in the package comment.
func configuration(nodeName, root string, probe, resync time.Duration) (*options.KubeletFlags, *kubeletconfig.KubeletConfiguration, error) {
	f := options.NewKubeletFlags()
	f.RootDirectory = root
	f.HostnameOverride = nodeName
	f.NodeIP = "127.0.0.1"
	f.MinimumGCAge = metav1.Duration{Duration: time.Minute}
	f.MaxContainerCount = 100
	f.MaxPerPodContainerCount = 2

	c, err := options.NewKubeletConfiguration()
	if err != nil {
		return nil, nil, err
	}
	c.StaticPodURL = ""
	c.StaticPodPath = filepath.Join(root, "static-pods")
	c.PodLogsDir = filepath.Join(root, "pod-logs")
	c.EnableServer = false
	c.HealthzPort = 0
	c.ReadOnlyPort = 0
	c.FileCheckFrequency.Duration = 20 * time.Second
	c.HTTPCheckFrequency.Duration = 20 * time.Second
	c.NodeStatusUpdateFrequency.Duration = 10 * time.Second
	c.NodeStatusReportFrequency.Duration = 5 * time.Minute
	c.SyncFrequency.Duration = resync
	c.EvictionPressureTransitionPeriod.Duration = 5 * time.Minute
	c.MaxPods = 110
	c.PodsPerCore = 0
	c.ClusterDNS = []string{}
	c.ImageGCHighThresholdPercent = 90
	c.ImageGCLowThresholdPercent = 80
	c.ProviderID = "kubemark://" + nodeName
	c.VolumeStatsAggPeriod.Duration = probe
	c.CgroupRoot = ""
	c.CPUCFSQuota = true
	c.EnableControllerAttachDetach = false
	c.EnableDebuggingHandlers = false
	c.CgroupsPerQOS = false
	c.HairpinMode = kubeletconfig.HairpinVeth
	c.MaxOpenFiles = 1024
	c.RegistryBurst = 10
	c.RegistryPullQPS = 5.0
	c.ResolverConfig = kubetypes.ResolvConfDefault
	c.KubeletCgroups = "/kubelet"
	c.SerializeImagePulls = true
	c.SystemCgroups = ""
	c.ProtectKernelDefaults = false
	c.RegisterNode = true
	c.LocalStorageCapacityIsolation = true
	return f, c, nil
}
