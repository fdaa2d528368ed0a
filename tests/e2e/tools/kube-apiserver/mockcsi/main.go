// Command mockcsi is a CSI node plugin for the e2e suites' hollow kubelets: it registers with
// each kubelet's plugin watcher, stages and publishes any volume (nothing is mounted: the hollow
// kubelet's mounter is a fake), and answers NodeGetVolumeHealth and NodeGetStorageHealth from a
// JSON file the test rewrites while it runs. A test changes the driver's answer by replacing the
// file (write and rename, so that no call reads half); it is read again when it changed.
//
//	{"volumes": {"<volume handle>": [{"status": "DEGRADED", "reason": "DiskSlow", "message": "..."}]},
//	 "otherVolumes": [{"status": "DEGRADED", "reason": "DiskSlow"}],
//	 "storage": [{"status": "STORAGE_DEGRADED", "reason": "PoolSlow", "message": "...",
//	              "accessMode": "SINGLE_NODE_WRITER", "volumeMode": "mount"}]}
//
// A status is a CSI enum name (DEGRADED, INACCESSIBLE, DATA_LOSS; STORAGE_DEGRADED,
// STORAGE_UNREACHABLE); any other name is sent as the enum's UNKNOWN value, which the kubelet
// must drop. A volume not in "volumes" gets "otherVolumes". A missing or unreadable file is an
// empty answer.
//
// One process serves any number of nodes (--node, once per node), as one driver's node plugin
// would run on each: a scale test then runs one driver process, not one per node. Each node has
// its own sockets under the kubelet's root directory. Every call is logged, one line each, unless
// --quiet, so that a failed test shows what the kubelet asked.
//
// With --served, the first time each node's storage and each volume is answered from a file
// with a new "label", a JSON line says when: {"label": "...", "node": "...", "volume": "..."
// (empty for storage), "at": RFC 3339}. A test then times the kubelet's write from the moment
// the kubelet learned of the change, whatever its probe's phase.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	registration "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

type condition struct {
	Status     string `json:"status"`
	Reason     string `json:"reason"`
	Message    string `json:"message"`
	AccessMode string `json:"accessMode,omitempty"`
	VolumeMode string `json:"volumeMode,omitempty"`
}

type answers struct {
	Label        string                 `json:"label"`
	Volumes      map[string][]condition `json:"volumes"`
	OtherVolumes []condition            `json:"otherVolumes"`
	Storage      []condition            `json:"storage"`
}

// healthFile is the answers file, parsed again only when it changed: with thousands of volumes
// probed a minute, parsing it on every call would be the process's whole cost.
type healthFile struct {
	path string
	mu   sync.Mutex
	// What the last read saw: the file's identity, and what it held.
	size    int64
	modTime time.Time
	inode   uint64
	answers answers
}

// read returns the answers the test wrote last; none when there is no file yet.
func (h *healthFile) read() answers {
	h.mu.Lock()
	defer h.mu.Unlock()
	info, err := os.Stat(h.path)
	if err != nil {
		h.size, h.modTime, h.inode, h.answers = 0, time.Time{}, 0, answers{}
		return h.answers
	}
	var inode uint64
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		inode = st.Ino
	}
	if info.Size() == h.size && info.ModTime().Equal(h.modTime) && inode == h.inode {
		return h.answers
	}
	var a answers
	data, err := os.ReadFile(h.path)
	if err == nil {
		if err := json.Unmarshal(data, &a); err != nil {
			log.Printf("health file %s: %v", h.path, err)
		}
	}
	h.size, h.modTime, h.inode, h.answers = info.Size(), info.ModTime(), inode, a
	return a
}

// volume returns the answer for one volume.
func (a answers) volume(handle string) []condition {
	if c, ok := a.Volumes[handle]; ok {
		return c
	}
	return a.OtherVolumes
}

// servedLog records the first answer of each label, per node and volume.
type servedLog struct {
	mu   sync.Mutex
	out  *os.File
	last map[[2]string]string // (node, volume) -> the label last answered
}

// answered records that node answered volume ("" for storage) from a file labelled label.
func (s *servedLog) answered(label, node, volume string) {
	if s == nil || label == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	key := [2]string{node, volume}
	if s.last[key] == label {
		return
	}
	s.last[key] = label
	line, _ := json.Marshal(map[string]string{
		"label": label, "node": node, "volume": volume,
		"at": time.Now().UTC().Format(time.RFC3339Nano),
	})
	if _, err := s.out.Write(append(line, '\n')); err != nil {
		log.Printf("served log: %v", err)
	}
}

// driver is the plugin as one node sees it.
type driver struct {
	csi.UnimplementedIdentityServer
	csi.UnimplementedNodeServer
	registration.UnimplementedRegistrationServer
	name, endpoint, nodeID string
	health                 *healthFile
	served                 *servedLog
	quiet                  bool
}

func (d *driver) logf(format string, args ...any) {
	if !d.quiet {
		log.Printf("%s: "+format, append([]any{d.nodeID}, args...)...)
	}
}

// Registration, as the kubelet's plugin watcher asks it.

func (d *driver) GetInfo(context.Context, *registration.InfoRequest) (*registration.PluginInfo, error) {
	return &registration.PluginInfo{
		Type:              registration.CSIPlugin,
		Name:              d.name,
		Endpoint:          d.endpoint,
		SupportedVersions: []string{"1.0.0"},
	}, nil
}

func (d *driver) NotifyRegistrationStatus(_ context.Context, status *registration.RegistrationStatus) (*registration.RegistrationStatusResponse, error) {
	log.Printf("%s: registered: %v %q", d.nodeID, status.GetPluginRegistered(), status.GetError())
	return &registration.RegistrationStatusResponse{}, nil
}

// Identity.

func (d *driver) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: d.name, VendorVersion: "1.0.0"}, nil
}

func (d *driver) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	return &csi.GetPluginCapabilitiesResponse{}, nil
}

func (d *driver) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	return &csi.ProbeResponse{}, nil
}

// Node.

func (d *driver) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{NodeId: d.nodeID}, nil
}

func (d *driver) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	capability := func(t csi.NodeServiceCapability_RPC_Type) *csi.NodeServiceCapability {
		return &csi.NodeServiceCapability{Type: &csi.NodeServiceCapability_Rpc{
			Rpc: &csi.NodeServiceCapability_RPC{Type: t}}}
	}
	return &csi.NodeGetCapabilitiesResponse{Capabilities: []*csi.NodeServiceCapability{
		capability(csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME),
		capability(csi.NodeServiceCapability_RPC_GET_VOLUME_HEALTH),
		capability(csi.NodeServiceCapability_RPC_GET_STORAGE_HEALTH),
	}}, nil
}

func (d *driver) NodeStageVolume(_ context.Context, r *csi.NodeStageVolumeRequest) (*csi.NodeStageVolumeResponse, error) {
	d.logf("stage %s", r.GetVolumeId())
	return &csi.NodeStageVolumeResponse{}, os.MkdirAll(r.GetStagingTargetPath(), 0o750)
}

func (d *driver) NodeUnstageVolume(_ context.Context, r *csi.NodeUnstageVolumeRequest) (*csi.NodeUnstageVolumeResponse, error) {
	d.logf("unstage %s", r.GetVolumeId())
	return &csi.NodeUnstageVolumeResponse{}, nil
}

func (d *driver) NodePublishVolume(_ context.Context, r *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	d.logf("publish %s", r.GetVolumeId())
	return &csi.NodePublishVolumeResponse{}, os.MkdirAll(r.GetTargetPath(), 0o750)
}

func (d *driver) NodeUnpublishVolume(_ context.Context, r *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	d.logf("unpublish %s", r.GetVolumeId())
	return &csi.NodeUnpublishVolumeResponse{}, os.RemoveAll(r.GetTargetPath())
}

func (d *driver) NodeGetVolumeHealth(_ context.Context, r *csi.NodeGetVolumeHealthRequest) (*csi.NodeGetVolumeHealthResponse, error) {
	d.logf("volume health %s", r.GetVolumeId())
	a := d.health.read()
	d.served.answered(a.Label, d.nodeID, r.GetVolumeId())
	var entries []*csi.VolumeHealth_VolumeHealthEntry
	for _, c := range a.volume(r.GetVolumeId()) {
		entries = append(entries, &csi.VolumeHealth_VolumeHealthEntry{
			Status:  csi.VolumeHealthErrorType(csi.VolumeHealthErrorType_value[c.Status]),
			Reason:  c.Reason,
			Message: c.Message,
		})
	}
	return &csi.NodeGetVolumeHealthResponse{VolumeHealth: &csi.VolumeHealth{
		VolumeId: r.GetVolumeId(), HealthStatuses: entries}}, nil
}

func (d *driver) NodeGetStorageHealth(context.Context, *csi.NodeGetStorageHealthRequest) (*csi.NodeGetStorageHealthResponse, error) {
	d.logf("storage health")
	a := d.health.read()
	d.served.answered(a.Label, d.nodeID, "")
	var entries []*csi.NodeGetStorageHealthResponse_StorageBackendHealth
	for _, c := range a.Storage {
		entry := &csi.NodeGetStorageHealthResponse_StorageBackendHealth{
			Status:  csi.StorageHealthErrorType(csi.StorageHealthErrorType_value[c.Status]),
			Reason:  c.Reason,
			Message: c.Message,
		}
		if c.AccessMode != "" {
			capability := &csi.VolumeCapability{AccessMode: &csi.VolumeCapability_AccessMode{
				Mode: csi.VolumeCapability_AccessMode_Mode(csi.VolumeCapability_AccessMode_Mode_value[c.AccessMode])}}
			if c.VolumeMode == "block" {
				capability.AccessType = &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}
			} else {
				capability.AccessType = &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}}
			}
			entry.VolumeCapability = capability
		}
		entries = append(entries, entry)
	}
	return &csi.NodeGetStorageHealthResponse{BackendHealth: entries}, nil
}

// listen serves on a fresh Unix socket at path.
func listen(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, err
	}
	if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	return net.Listen("unix", path)
}

// nodes is --node, given once per node: "<node name>=<kubelet root directory>".
type nodes map[string]string

func (n nodes) String() string { return fmt.Sprint(map[string]string(n)) }

func (n nodes) Set(value string) error {
	name, root, ok := strings.Cut(value, "=")
	if !ok || name == "" || root == "" {
		return fmt.Errorf("want <node name>=<kubelet root directory>, got %q", value)
	}
	n[name] = root
	return nil
}

// serve starts d's CSI socket, then its registration socket in the kubelet's plugins_registry
// (the plugin watcher finds the driver by it, so it comes last, once the CSI socket answers).
func serve(d *driver, registry string) ([]*grpc.Server, error) {
	csiListener, err := listen(d.endpoint)
	if err != nil {
		return nil, fmt.Errorf("CSI socket: %w", err)
	}
	csiServer := grpc.NewServer()
	csi.RegisterIdentityServer(csiServer, d)
	csi.RegisterNodeServer(csiServer, d)
	go func() { log.Fatal(csiServer.Serve(csiListener)) }()
	regListener, err := listen(filepath.Join(registry, fmt.Sprintf("%s-reg.sock", d.name)))
	if err != nil {
		return nil, fmt.Errorf("registration socket: %w", err)
	}
	regServer := grpc.NewServer()
	registration.RegisterRegistrationServer(regServer, d)
	go func() { log.Fatal(regServer.Serve(regListener)) }()
	return []*grpc.Server{regServer, csiServer}, nil
}

func main() {
	var name, health, served string
	var quiet bool
	roots := nodes{}
	flag.StringVar(&name, "name", "", "the driver's name, as CSIDriver and PersistentVolumes give it")
	flag.Var(roots, "node", "a node to serve, <node name>=<its kubelet's root directory>; once per node")
	flag.StringVar(&health, "health", "", "the JSON file of health answers, read again when it changed")
	flag.BoolVar(&quiet, "quiet", false, "log registrations and errors only, not every call")
	flag.StringVar(&served, "served", "", "a file of JSON lines: when each node and volume was first answered from a newly labelled file")
	flag.Parse()
	log.SetFlags(log.Lmicroseconds)
	if name == "" || len(roots) == 0 || health == "" {
		log.Fatal("mockcsi: --name, --node and --health are required")
	}
	file := &healthFile{path: health}
	var servedTo *servedLog
	if served != "" {
		out, err := os.OpenFile(served, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o640)
		if err != nil {
			log.Fatalf("--served: %v", err)
		}
		defer out.Close()
		servedTo = &servedLog{out: out, last: map[[2]string]string{}}
	}
	var servers []*grpc.Server
	for node, root := range roots {
		d := &driver{
			name:     name,
			nodeID:   node,
			endpoint: filepath.Join(root, "plugins", name, "csi.sock"),
			health:   file,
			served:   servedTo,
			quiet:    quiet,
		}
		started, err := serve(d, filepath.Join(root, "plugins_registry"))
		if err != nil {
			log.Fatalf("node %s: %v", node, err)
		}
		servers = append(servers, started...)
	}
	log.Printf("serving %s for %d nodes", name, len(roots))

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
	for _, server := range servers {
		server.Stop()
	}
	for _, root := range roots {
		_ = os.Remove(filepath.Join(root, "plugins_registry", name+"-reg.sock"))
	}
}
