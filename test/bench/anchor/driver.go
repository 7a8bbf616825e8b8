package main

// A driver.Driver of gardener MCM for the simulated cloud of this project's virtual provider
// (lib/providers/virtual): with a target cluster, a VM *is* its Node. The Node is named after the
// machine, carries providerID virtual://<zone>/<name>, the project's virtual.mcm-ts.io/* records
// and kwok's annotation, and registers Ready at once (0 s boot). Only what the scale benchmark
// needs: the default VM shape (or the class's nodeTemplate), no latency, errors or failure modes.

import (
	"context"
	"crypto/sha256"
	"fmt"
	"strings"
	"time"

	"github.com/gardener/machine-controller-manager/pkg/apis/machine/v1alpha1"
	"github.com/gardener/machine-controller-manager/pkg/util/provider/driver"
	"github.com/gardener/machine-controller-manager/pkg/util/provider/machinecodes/codes"
	"github.com/gardener/machine-controller-manager/pkg/util/provider/machinecodes/status"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// Keys of the virtual cloud's records (must equal lib/providers/virtual/vm.ts).
const (
	keyVM           = "virtual.mcm-ts.io/vm"
	keyMachine      = "virtual.mcm-ts.io/machine"
	keyMachineClass = "virtual.mcm-ts.io/machine-class"
	keyState        = "virtual.mcm-ts.io/state"
	keyBootAt       = "virtual.mcm-ts.io/boot-at"
	kwokAnnotation  = "kwok.x-k8s.io/node"
	providerPrefix  = "virtual://"
)

// shape is what a VM looks like: the class's nodeTemplate, else the virtual provider's defaults.
type shape struct {
	instanceType, region, zone, arch string
	capacity                         corev1.ResourceList
}

func shapeOf(class *v1alpha1.MachineClass) shape {
	t := class.NodeTemplate
	if t == nil {
		return shape{
			instanceType: "virtual-small",
			region:       "virtual-region",
			zone:         "virtual-zone-a",
			arch:         "amd64",
			capacity: corev1.ResourceList{
				corev1.ResourceCPU:              resource.MustParse("2"),
				corev1.ResourceMemory:           resource.MustParse("4Gi"),
				corev1.ResourcePods:             resource.MustParse("110"),
				corev1.ResourceEphemeralStorage: resource.MustParse("50Gi"),
			},
		}
	}
	s := shape{instanceType: t.InstanceType, region: t.Region, zone: t.Zone, arch: "amd64", capacity: t.Capacity.DeepCopy()}
	if t.Architecture != nil {
		s.arch = *t.Architecture
	}
	if s.capacity == nil {
		s.capacity = corev1.ResourceList{}
	}
	if _, ok := s.capacity[corev1.ResourcePods]; !ok {
		s.capacity[corev1.ResourcePods] = resource.MustParse("110")
	}
	return s
}

// internalIP is a stable private address from a hash of the name (as internalIPOf in vm.ts).
func internalIP(name string) string {
	h := sha256.Sum256([]byte(name))
	return fmt.Sprintf("10.%d.%d.%d", h[0], h[1], max(1, int(h[2])))
}

func addresses(name string) []corev1.NodeAddress {
	return []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: internalIP(name)},
		{Type: corev1.NodeHostName, Address: name},
	}
}

func machineKey(m *v1alpha1.Machine) string { return m.Namespace + "/" + m.Name }

// vmNode is the Node of a new VM, registered Ready with the labels and taints of the machine's
// node template, as a kubelet started with --node-labels and --register-with-taints registers.
func vmNode(m *v1alpha1.Machine, class *v1alpha1.MachineClass, now time.Time) *corev1.Node {
	n := bareVMNode(m, class, now)
	for k, v := range m.Spec.NodeTemplateSpec.Labels {
		if _, set := n.Labels[k]; !set {
			n.Labels[k] = v
		}
	}
	n.Spec.Taints = append(n.Spec.Taints, m.Spec.NodeTemplateSpec.Spec.Taints...)
	return n
}

func bareVMNode(m *v1alpha1.Machine, class *v1alpha1.MachineClass, now time.Time) *corev1.Node {
	s := shapeOf(class)
	name := m.Name
	stamp := metav1.NewTime(now.Truncate(time.Second))
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: name,
			Labels: map[string]string{
				corev1.LabelHostname:                name,
				corev1.LabelArchStable:              s.arch,
				"beta.kubernetes.io/arch":           s.arch,
				corev1.LabelOSStable:                "linux",
				"beta.kubernetes.io/os":             "linux",
				corev1.LabelInstanceTypeStable:      s.instanceType,
				corev1.LabelInstanceType:            s.instanceType,
				corev1.LabelTopologyRegion:          s.region,
				corev1.LabelFailureDomainBetaRegion: s.region,
				corev1.LabelTopologyZone:            s.zone,
				corev1.LabelFailureDomainBetaZone:   s.zone,
				keyVM:                               "true",
			},
			Annotations: map[string]string{
				keyMachine:      machineKey(m),
				keyMachineClass: class.Name,
				keyState:        "running",
				keyBootAt:       now.UTC().Format("2006-01-02T15:04:05.000Z"),
				kwokAnnotation:  "fake",
			},
		},
		Spec: corev1.NodeSpec{ProviderID: providerPrefix + s.zone + "/" + name},
		Status: corev1.NodeStatus{
			Capacity:    s.capacity,
			Allocatable: s.capacity.DeepCopy(),
			Conditions: []corev1.NodeCondition{{
				Type:               corev1.NodeReady,
				Status:             corev1.ConditionTrue,
				Reason:             "KubeletReady",
				Message:            "virtual machine is running",
				LastHeartbeatTime:  stamp,
				LastTransitionTime: stamp,
			}},
			Addresses: addresses(name),
			NodeInfo: corev1.NodeSystemInfo{
				Architecture:            s.arch,
				OperatingSystem:         "linux",
				KubeletVersion:          "virtual",
				ContainerRuntimeVersion: "virtual",
				KernelVersion:           "virtual",
				OSImage:                 "virtual machine",
			},
			Phase: corev1.NodeRunning,
		},
	}
}

// virtualDriver reads VMs from a watch-fed cache of the VM Nodes and writes them with create and
// delete only, like the virtual provider's NodeVmStore.
type virtualDriver struct {
	client kubernetes.Interface
	nodes  corelisters.NodeLister
	synced cache.InformerSynced
}

var _ driver.Driver = (*virtualDriver)(nil)

func newVirtualDriver(client kubernetes.Interface, stop <-chan struct{}) *virtualDriver {
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = keyVM + "=true" }))
	nodes := factory.Core().V1().Nodes()
	d := &virtualDriver{client: client, nodes: nodes.Lister(), synced: nodes.Informer().HasSynced}
	factory.Start(stop)
	return d
}

func (d *virtualDriver) waitForSync(ctx context.Context) error {
	if !cache.WaitForCacheSync(ctx.Done(), d.synced) {
		return status.Error(codes.Unavailable, "virtual cloud: the VM cache has not synced")
	}
	return nil
}

// vmName is the VM named in the machine's providerID, else the machine's name.
func vmName(m *v1alpha1.Machine) string {
	if rest, ok := strings.CutPrefix(m.Spec.ProviderID, providerPrefix); ok {
		if i := strings.LastIndex(rest, "/"); i >= 0 && i < len(rest)-1 {
			return rest[i+1:]
		}
	}
	return m.Name
}

// ownVM is the node when it is the live VM of that machine.
func ownVM(n *corev1.Node, m *v1alpha1.Machine) *corev1.Node {
	if n == nil || n.Labels[keyVM] != "true" || n.DeletionTimestamp != nil || n.Annotations[keyMachine] != machineKey(m) {
		return nil
	}
	return n
}

func (d *virtualDriver) cached(m *v1alpha1.Machine) *corev1.Node {
	n, err := d.nodes.Get(vmName(m))
	if err != nil {
		return nil
	}
	return ownVM(n, m)
}

func notFound(m *v1alpha1.Machine) error {
	return status.Error(codes.NotFound, fmt.Sprintf("no VM for machine %s", machineKey(m)))
}

func unavailable(op string, err error) error {
	return status.Error(codes.Unavailable, fmt.Sprintf("virtual cloud: %s: %v", op, err))
}

func (d *virtualDriver) CreateMachine(ctx context.Context, req *driver.CreateMachineRequest) (*driver.CreateMachineResponse, error) {
	if err := d.waitForSync(ctx); err != nil {
		return nil, err
	}
	m := req.Machine
	n := d.cached(m)
	if n == nil {
		created, err := d.client.CoreV1().Nodes().Create(ctx, vmNode(m, req.MachineClass, time.Now()), metav1.CreateOptions{})
		switch {
		case err == nil:
			n = created
		case apierrors.IsAlreadyExists(err):
			// A repeated call (the cache lags): the VM is ours if it was made for this machine.
			existing, getErr := d.client.CoreV1().Nodes().Get(ctx, m.Name, metav1.GetOptions{})
			if getErr != nil {
				return nil, unavailable("read VM "+m.Name, getErr)
			}
			if existing.DeletionTimestamp != nil {
				return nil, status.Error(codes.Unavailable, fmt.Sprintf("the previous VM %s is still shutting down", m.Name))
			}
			if n = ownVM(existing, m); n == nil {
				return nil, status.Error(codes.AlreadyExists, fmt.Sprintf("node %s exists and is not the VM of machine %s", m.Name, machineKey(m)))
			}
		default:
			return nil, unavailable("create VM "+m.Name, err)
		}
	}
	return &driver.CreateMachineResponse{ProviderID: n.Spec.ProviderID, NodeName: n.Name, Addresses: n.Status.Addresses}, nil
}

// InitializeMachine: a virtual VM needs no initialisation; MCM skips the step on Unimplemented.
func (d *virtualDriver) InitializeMachine(context.Context, *driver.InitializeMachineRequest) (*driver.InitializeMachineResponse, error) {
	return nil, status.Error(codes.Unimplemented, "the virtual cloud needs no VM initialisation")
}

func (d *virtualDriver) DeleteMachine(ctx context.Context, req *driver.DeleteMachineRequest) (*driver.DeleteMachineResponse, error) {
	if err := d.waitForSync(ctx); err != nil {
		return nil, err
	}
	m := req.Machine
	n := d.cached(m)
	if n == nil {
		// A lagging cache must not leak a VM: read it live before answering NotFound.
		live, err := d.client.CoreV1().Nodes().Get(ctx, vmName(m), metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return nil, unavailable("read VM "+vmName(m), err)
		}
		if err == nil {
			n = ownVM(live, m)
		}
	}
	if n == nil {
		return nil, notFound(m)
	}
	uid := types.UID(n.UID)
	err := d.client.CoreV1().Nodes().Delete(ctx, n.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if apierrors.IsNotFound(err) {
		return nil, notFound(m)
	}
	if err != nil {
		return nil, unavailable("delete VM "+n.Name, err)
	}
	return &driver.DeleteMachineResponse{}, nil
}

func (d *virtualDriver) GetMachineStatus(ctx context.Context, req *driver.GetMachineStatusRequest) (*driver.GetMachineStatusResponse, error) {
	if err := d.waitForSync(ctx); err != nil {
		return nil, err
	}
	n := d.cached(req.Machine)
	if n == nil {
		return nil, notFound(req.Machine)
	}
	return &driver.GetMachineStatusResponse{ProviderID: n.Spec.ProviderID, NodeName: n.Name, Addresses: n.Status.Addresses}, nil
}

func (d *virtualDriver) ListMachines(ctx context.Context, req *driver.ListMachinesRequest) (*driver.ListMachinesResponse, error) {
	if err := d.waitForSync(ctx); err != nil {
		return nil, err
	}
	all, err := d.nodes.List(labels.Everything())
	if err != nil {
		return nil, unavailable("list VMs", err)
	}
	prefix := req.MachineClass.Namespace + "/"
	list := map[string]string{}
	for _, n := range all {
		owner := n.Annotations[keyMachine]
		if n.DeletionTimestamp != nil || n.Annotations[keyMachineClass] != req.MachineClass.Name || !strings.HasPrefix(owner, prefix) {
			continue
		}
		list[n.Spec.ProviderID] = strings.TrimPrefix(owner, prefix)
	}
	return &driver.ListMachinesResponse{MachineList: list}, nil
}

func (d *virtualDriver) GetVolumeIDs(_ context.Context, req *driver.GetVolumeIDsRequest) (*driver.GetVolumeIDsResponse, error) {
	ids := []string{}
	for _, pv := range req.PVSpecs {
		if pv != nil && pv.CSI != nil {
			ids = append(ids, pv.CSI.VolumeHandle)
		}
	}
	return &driver.GetVolumeIDsResponse{VolumeIDs: ids}, nil
}
