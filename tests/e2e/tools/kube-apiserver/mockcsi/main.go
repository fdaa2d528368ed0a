// Command mockcsi is a CSI node plugin for the e2e suite's hollow kubelet: it registers with the
// kubelet's plugin watcher, stages and publishes any volume (nothing is mounted: the hollow
// kubelet's mounter is a fake), and answers NodeGetVolumeHealth and NodeGetStorageHealth from a
// JSON file the test rewrites while it runs. The file is read again on every call, so a test
// changes the driver's answer by replacing it (write and rename, so that no call reads half).
//
//	{"volumes": {"<volume handle>": [{"status": "DEGRADED", "reason": "DiskSlow", "message": "..."}]},
//	 "storage": [{"status": "STORAGE_DEGRADED", "reason": "PoolSlow", "message": "...",
//	              "accessMode": "SINGLE_NODE_WRITER", "volumeMode": "mount"}]}
//
// A status is a CSI enum name (DEGRADED, INACCESSIBLE, DATA_LOSS; STORAGE_DEGRADED,
// STORAGE_UNREACHABLE); any other name is sent as the enum's UNKNOWN value, which the kubelet
// must drop. A missing or unreadable file is an empty answer. Every call is logged, one line
// each, so that a failed test shows what the kubelet asked.
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
	"syscall"

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
	Volumes map[string][]condition `json:"volumes"`
	Storage []condition            `json:"storage"`
}

type driver struct {
	csi.UnimplementedIdentityServer
	csi.UnimplementedNodeServer
	registration.UnimplementedRegistrationServer
	name, endpoint, nodeID, health string
}

// read returns the answers the test wrote last; none when there is no file yet.
func (d *driver) read() answers {
	var a answers
	data, err := os.ReadFile(d.health)
	if err != nil {
		return a
	}
	if err := json.Unmarshal(data, &a); err != nil {
		log.Printf("health file %s: %v", d.health, err)
	}
	return a
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
	log.Printf("registered: %v %q", status.GetPluginRegistered(), status.GetError())
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
	log.Printf("stage %s", r.GetVolumeId())
	return &csi.NodeStageVolumeResponse{}, os.MkdirAll(r.GetStagingTargetPath(), 0o750)
}

func (d *driver) NodeUnstageVolume(_ context.Context, r *csi.NodeUnstageVolumeRequest) (*csi.NodeUnstageVolumeResponse, error) {
	log.Printf("unstage %s", r.GetVolumeId())
	return &csi.NodeUnstageVolumeResponse{}, nil
}

func (d *driver) NodePublishVolume(_ context.Context, r *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	log.Printf("publish %s", r.GetVolumeId())
	return &csi.NodePublishVolumeResponse{}, os.MkdirAll(r.GetTargetPath(), 0o750)
}

func (d *driver) NodeUnpublishVolume(_ context.Context, r *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	log.Printf("unpublish %s", r.GetVolumeId())
	return &csi.NodeUnpublishVolumeResponse{}, os.RemoveAll(r.GetTargetPath())
}

func (d *driver) NodeGetVolumeHealth(_ context.Context, r *csi.NodeGetVolumeHealthRequest) (*csi.NodeGetVolumeHealthResponse, error) {
	log.Printf("volume health %s", r.GetVolumeId())
	var entries []*csi.VolumeHealth_VolumeHealthEntry
	for _, c := range d.read().Volumes[r.GetVolumeId()] {
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
	log.Printf("storage health")
	var entries []*csi.NodeGetStorageHealthResponse_StorageBackendHealth
	for _, c := range d.read().Storage {
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

func main() {
	d := &driver{}
	var registry string
	flag.StringVar(&d.name, "name", "", "the driver's name, as CSIDriver and PersistentVolumes give it")
	flag.StringVar(&d.nodeID, "node-id", "", "the node ID NodeGetInfo answers (the node's name)")
	flag.StringVar(&d.endpoint, "endpoint", "", "the CSI socket's path")
	flag.StringVar(&registry, "registry", "", "the kubelet's plugins_registry directory")
	flag.StringVar(&d.health, "health", "", "the JSON file of health answers, read on every call")
	flag.Parse()
	log.SetFlags(log.Lmicroseconds)
	if d.name == "" || d.nodeID == "" || d.endpoint == "" || registry == "" || d.health == "" {
		log.Fatal("mockcsi: --name, --node-id, --endpoint, --registry and --health are required")
	}

	csiListener, err := listen(d.endpoint)
	if err != nil {
		log.Fatalf("CSI socket: %v", err)
	}
	csiServer := grpc.NewServer()
	csi.RegisterIdentityServer(csiServer, d)
	csi.RegisterNodeServer(csiServer, d)
	go func() { log.Fatal(csiServer.Serve(csiListener)) }()

	// The plugin watcher finds the driver by this socket; it is created last, once the CSI
	// socket answers.
	regListener, err := listen(filepath.Join(registry, fmt.Sprintf("%s-reg.sock", d.name)))
	if err != nil {
		log.Fatalf("registration socket: %v", err)
	}
	regServer := grpc.NewServer()
	registration.RegisterRegistrationServer(regServer, d)
	go func() { log.Fatal(regServer.Serve(regListener)) }()
	log.Printf("serving %s for node %s on %s", d.name, d.nodeID, d.endpoint)

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
	regServer.Stop()
	csiServer.Stop()
	_ = os.Remove(regListener.Addr().String())
}
