// Command autoscaler-floor is the cheapest server of cluster-autoscaler's externalgrpc protocol we
// can think of: grpc-go with a pass-through codec, every answer encoded once at start-up and looked
// up in a map per call, nothing else. It serves the node groups `npm run bench autoscaler` writes
// into the API server (GROUPS deployments NAMESPACE/pool-G of PER_GROUP nodes pool-G-mI with
// providerID PREFIX+pool-G-mI), so the benchmark can run the same cluster-autoscaler against it and
// against our server and compare the loop times: what is left over the floor is our server's cost.
//
// The messages are written and read with protowire by field number, after protos/externalgrpc.proto
// of this repository (the wire format the autoscaler 1.35+ speaks). What depends on objects the
// floor does not read (prices, per-group options, templates) comes from the answers file the
// benchmark writes (--answers, JSON: our server's answers, recorded): node prices by group, pod
// prices by pod name, each group's option overrides and template answer, and whether scale-ups are
// refused (the benchmark's API server refuses them to our server). Where the file gives nothing, the
// floor refuses as our server would (NOT_FOUND for a price, UNIMPLEMENTED for a template), so the
// autoscaler makes the same calls against both.
//
// Usage: autoscaler-floor --address=127.0.0.1:0 --groups=100 --per-group=50 [--answers=FILE]
// It prints "listening on HOST:PORT" once serving. On SIGUSR1 it prints one line
// "stats cpu_us=CPU METHOD=CALLS ..." (its CPU time so far and the calls served by method, from
// the start), so that a benchmark can take the difference over a window; SIGTERM or SIGINT print
// the same line and stop it.
package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"net"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
)

const service = "clusterautoscaler.cloudprovider.v1.externalgrpc.CloudProvider"

// frame is a message as it travels: the codec neither encodes nor decodes.
type frame []byte

type passThrough struct{}

func (passThrough) Marshal(v any) ([]byte, error) { return *(v.(*frame)), nil }

func (passThrough) Unmarshal(data []byte, v any) error {
	f := v.(*frame)
	*f = append((*f)[:0], data...)
	return nil
}

func (passThrough) Name() string { return "proto" }

// answersFile is what the benchmark hands the floors (--answers): our server's answers for what
// depends on objects the floor does not read, recorded before the autoscaler starts.
type answersFile struct {
	// By group id.
	Groups map[string]groupAnswers `json:"groups"`
	// Price per hour by pod name, "*" for any other pod; none: NOT_FOUND.
	PodPrices map[string]float64 `json:"podPrices"`
	// Non-empty: IncreaseSize answers UNAVAILABLE with this message (the benchmark's API server
	// refuses our server's scale-up writes).
	RefuseIncrease string `json:"refuseIncrease"`
}

type groupAnswers struct {
	// Price of one node per hour; absent: NOT_FOUND.
	NodePrice *float64 `json:"nodePrice"`
	// NodeGroupTemplateNodeInfoResponse, base64; empty: UNIMPLEMENTED.
	Template string `json:"template"`
	// What the group's annotations set (OptionOverrides of lib/autoscaler/options.ts); absent:
	// the group answers no options and the autoscaler's defaults apply.
	Options *optionOverrides `json:"options"`
}

type optionOverrides struct {
	ScaleDownUtilizationThreshold    *float64 `json:"scaleDownUtilizationThreshold"`
	ScaleDownGpuUtilizationThreshold *float64 `json:"scaleDownGpuUtilizationThreshold"`
	ScaleDownUnneededMs              *float64 `json:"scaleDownUnneededMs"`
	ScaleDownUnreadyMs               *float64 `json:"scaleDownUnreadyMs"`
	MaxNodeProvisionMs               *float64 `json:"maxNodeProvisionMs"`
}

// group is one node group and its answers, re-encoded only when a scaling call changes its size.
type group struct {
	id        string
	min, max  int32
	target    atomic.Pointer[frame] // NodeGroupTargetSizeResponse
	forNode   atomic.Pointer[frame] // NodeGroupForNodeResponse
	instances frame                 // NodeGroupNodesResponse
	mu        sync.Mutex
	size      int32

	nodePrice *frame // PricingNodePriceResponse; nil: no price
	template  *frame // NodeGroupTemplateNodeInfoResponse; nil: no template
	options   *optionOverrides
	// NodeGroupGetOptions answers by the bytes of the defaults they were asked with (the
	// autoscaler sends one set), each merged and encoded on its first call.
	optionsMu     sync.RWMutex
	optionAnswers map[string]*frame
}

type floor struct {
	groups         []*group
	byID           map[string]*group
	byNode         map[string]*group // providerID and node name
	list           atomic.Pointer[frame]
	listMu         sync.Mutex
	empty          frame
	notFound       frame // NodeGroupForNodeResponse{nodeGroup: {id: ""}}
	podPrices      map[string]*frame
	anyPodPrice    *frame
	refuseIncrease error
}

func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func appendVarint(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func appendMessage(b []byte, num protowire.Number, m []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, m)
}

// nodeGroup encodes NodeGroup{id, minSize, maxSize, debug} as our server words it.
func (g *group) nodeGroup(size int32) []byte {
	var b []byte
	b = appendString(b, 1, g.id)
	b = appendVarint(b, 2, uint64(g.min))
	b = appendVarint(b, 3, uint64(g.max))
	return appendString(b, 4, fmt.Sprintf("%s (%d:%d, replicas=%d)", g.id, g.min, g.max, size))
}

// encode refreshes the answers that depend on the group's size; called with mu held.
func (g *group) encode() {
	target := frame(appendVarint(nil, 1, uint64(g.size)))
	g.target.Store(&target)
	forNode := frame(appendMessage(nil, 1, g.nodeGroup(g.size)))
	g.forNode.Store(&forNode)
}

func (f *floor) encodeList() {
	f.listMu.Lock()
	defer f.listMu.Unlock()
	var b []byte
	for _, g := range f.groups {
		g.mu.Lock()
		b = appendMessage(b, 1, g.nodeGroup(g.size))
		g.mu.Unlock()
	}
	list := frame(b)
	f.list.Store(&list)
}

func newFloor(namespace, prefix string, groups, perGroup int, answers answersFile) (*floor, error) {
	f := &floor{byID: map[string]*group{}, byNode: map[string]*group{}, empty: frame{}, podPrices: map[string]*frame{}}
	f.notFound = frame(appendMessage(nil, 1, nil))
	for gi := 0; gi < groups; gi++ {
		name := fmt.Sprintf("pool-%d", gi)
		g := &group{id: namespace + "/" + name, min: 0, max: int32(perGroup * 2), size: int32(perGroup)}
		var inst []byte
		for mi := 0; mi < perGroup; mi++ {
			node := fmt.Sprintf("%s-m%d", name, mi)
			providerID := prefix + node
			f.byNode[providerID] = g
			f.byNode[node] = g
			status := appendVarint(nil, 1, 1) // instanceRunning
			var one []byte
			one = appendString(one, 1, providerID)
			one = appendMessage(one, 2, status)
			inst = appendMessage(inst, 1, one)
		}
		g.instances = frame(inst)
		g.encode()
		f.groups = append(f.groups, g)
		f.byID[g.id] = g
	}
	f.encodeList()
	for id, a := range answers.Groups {
		g := f.byID[id]
		if g == nil {
			return nil, fmt.Errorf("answers for group %q, which is not served", id)
		}
		if a.NodePrice != nil {
			g.nodePrice = price(*a.NodePrice)
		}
		if a.Template != "" {
			t, err := base64.StdEncoding.DecodeString(a.Template)
			if err != nil {
				return nil, fmt.Errorf("template of group %q: %w", id, err)
			}
			template := frame(t)
			g.template = &template
		}
		g.options = a.Options
		g.optionAnswers = map[string]*frame{}
	}
	for name, p := range answers.PodPrices {
		if name == "*" {
			f.anyPodPrice = price(p)
		} else {
			f.podPrices[name] = price(p)
		}
	}
	if answers.RefuseIncrease != "" {
		f.refuseIncrease = status.Error(codes.Unavailable, answers.RefuseIncrease)
	}
	return f, nil
}

// price encodes PricingNodePriceResponse and PricingPodPriceResponse alike: {price: p}.
func price(p float64) *frame {
	b := protowire.AppendTag(nil, 1, protowire.Fixed64Type)
	b = protowire.AppendFixed64(b, math.Float64bits(p))
	a := frame(b)
	return &a
}

// templateGroup is the group id in the name the autoscaler gives the template nodes it prices,
// template-node-for-<group id>-<number>; "" for another name.
func templateGroup(name string) string {
	const prefix = "template-node-for-"
	if !strings.HasPrefix(name, prefix) {
		return ""
	}
	rest := name[len(prefix):]
	if i := strings.LastIndexByte(rest, '-'); i > 0 {
		return rest[:i]
	}
	return ""
}

// wireOptions is NodeGroupAutoscalingOptions as our server reads and writes it (durations in ns).
type wireOptions struct {
	utilization, gpuUtilization  float64
	zeroOrMax, ignoreDaemonSets  bool
	unneeded, unready, provision int64
}

// decodeDefaults reads the defaults of a GetOptions request: the 1.35+ Duration fields (8-10)
// first, else the metav1.Duration ones (3-5), as our server does.
func decodeDefaults(msg []byte) wireOptions {
	var o wireOptions
	var durations, legacy [3]int64
	var haveDuration [3]bool
	for len(msg) > 0 {
		n, typ, l := protowire.ConsumeTag(msg)
		if l < 0 {
			break
		}
		msg = msg[l:]
		m := protowire.ConsumeFieldValue(n, typ, msg)
		if m < 0 {
			break
		}
		v := msg[:m]
		msg = msg[m:]
		switch {
		case (n == 1 || n == 2) && typ == protowire.Fixed64Type:
			x, _ := protowire.ConsumeFixed64(v)
			if n == 1 {
				o.utilization = math.Float64frombits(x)
			} else {
				o.gpuUtilization = math.Float64frombits(x)
			}
		case (n == 6 || n == 7) && typ == protowire.VarintType:
			x, _ := protowire.ConsumeVarint(v)
			if n == 6 {
				o.zeroOrMax = x != 0
			} else {
				o.ignoreDaemonSets = x != 0
			}
		case n >= 3 && n <= 5 && typ == protowire.BytesType:
			b, _ := protowire.ConsumeBytes(v)
			legacy[n-3] = int64(varint64(b, 1))
		case n >= 8 && n <= 10 && typ == protowire.BytesType:
			b, _ := protowire.ConsumeBytes(v)
			durations[n-8] = int64(varint64(b, 1))*1e9 + int64(int32(varint64(b, 2)))
			haveDuration[n-8] = true
		}
	}
	ns := [3]*int64{&o.unneeded, &o.unready, &o.provision}
	for i := range ns {
		if haveDuration[i] {
			*ns[i] = durations[i]
		} else {
			*ns[i] = legacy[i]
		}
	}
	return o
}

// merge is the defaults with the group's overrides applied, as our server's mergeOptions.
func (o *optionOverrides) merge(d wireOptions) wireOptions {
	ns := func(ms float64) int64 { return int64(math.Round(ms * 1e6)) }
	if o.ScaleDownUtilizationThreshold != nil {
		d.utilization = *o.ScaleDownUtilizationThreshold
	}
	if o.ScaleDownGpuUtilizationThreshold != nil {
		d.gpuUtilization = *o.ScaleDownGpuUtilizationThreshold
	}
	if o.ScaleDownUnneededMs != nil {
		d.unneeded = ns(*o.ScaleDownUnneededMs)
	}
	if o.ScaleDownUnreadyMs != nil {
		d.unready = ns(*o.ScaleDownUnreadyMs)
	}
	if o.MaxNodeProvisionMs != nil {
		d.provision = ns(*o.MaxNodeProvisionMs)
	}
	return d
}

// encodeOptions writes NodeGroupAutoscalingOptionsResponse as our server does: the durations both
// as metav1.Duration (3-5, for autoscalers up to 1.34) and as google.protobuf.Duration (8-10).
func encodeOptions(o wireOptions) *frame {
	var m []byte
	double := func(num protowire.Number, v float64) {
		m = protowire.AppendTag(m, num, protowire.Fixed64Type)
		m = protowire.AppendFixed64(m, math.Float64bits(v))
	}
	double(1, o.utilization)
	double(2, o.gpuUtilization)
	durations := [3]int64{o.unneeded, o.unready, o.provision}
	for i, d := range durations {
		m = appendMessage(m, protowire.Number(3+i), appendVarint(nil, 1, uint64(d)))
	}
	if o.zeroOrMax {
		m = appendVarint(m, 6, 1)
	}
	if o.ignoreDaemonSets {
		m = appendVarint(m, 7, 1)
	}
	for i, d := range durations {
		var dm []byte
		dm = appendVarint(dm, 1, uint64(d/1e9))
		dm = appendVarint(dm, 2, uint64(d%1e9))
		m = appendMessage(m, protowire.Number(8+i), dm)
	}
	a := frame(appendMessage(nil, 1, m))
	return &a
}

// optionsAnswer is the group's NodeGroupGetOptions answer for these defaults, encoded on the first
// call with them.
func (g *group) optionsAnswer(defaults []byte) *frame {
	g.optionsMu.RLock()
	a := g.optionAnswers[string(defaults)]
	g.optionsMu.RUnlock()
	if a != nil {
		return a
	}
	a = encodeOptions(g.options.merge(decodeDefaults(defaults)))
	g.optionsMu.Lock()
	g.optionAnswers[string(defaults)] = a
	g.optionsMu.Unlock()
	return a
}

// field returns the bytes of the first length-delimited field num of a message, or nil.
func field(msg []byte, num protowire.Number) []byte {
	for len(msg) > 0 {
		n, typ, l := protowire.ConsumeTag(msg)
		if l < 0 {
			return nil
		}
		msg = msg[l:]
		if n == num && typ == protowire.BytesType {
			v, m := protowire.ConsumeBytes(msg)
			if m < 0 {
				return nil
			}
			return v
		}
		m := protowire.ConsumeFieldValue(n, typ, msg)
		if m < 0 {
			return nil
		}
		msg = msg[m:]
	}
	return nil
}

// varint64 returns the first varint field num of a message as it is on the wire, or 0.
func varint64(msg []byte, num protowire.Number) uint64 {
	for len(msg) > 0 {
		n, typ, l := protowire.ConsumeTag(msg)
		if l < 0 {
			return 0
		}
		msg = msg[l:]
		if n == num && typ == protowire.VarintType {
			v, m := protowire.ConsumeVarint(msg)
			if m < 0 {
				return 0
			}
			return v
		}
		m := protowire.ConsumeFieldValue(n, typ, msg)
		if m < 0 {
			return 0
		}
		msg = msg[m:]
	}
	return 0
}

// varint returns the first varint field num of a message, or 0.
func varint(msg []byte, num protowire.Number) int64 {
	for len(msg) > 0 {
		n, typ, l := protowire.ConsumeTag(msg)
		if l < 0 {
			return 0
		}
		msg = msg[l:]
		if n == num && typ == protowire.VarintType {
			v, m := protowire.ConsumeVarint(msg)
			if m < 0 {
				return 0
			}
			return int64(int32(v))
		}
		m := protowire.ConsumeFieldValue(n, typ, msg)
		if m < 0 {
			return 0
		}
		msg = msg[m:]
	}
	return 0
}

var (
	errNoPrice    = status.Error(codes.NotFound, "no price for this node or pod")
	errNoTemplate = status.Error(codes.Unimplemented, "no template: the group's MachineClass has no nodeTemplate")
)

// idOf rewrites a scaling request whose group id is field num into the id-only shape group() reads.
func idOf(req frame, num protowire.Number) frame {
	return frame(appendString(nil, 1, string(field(req, num))))
}

func (f *floor) group(req frame) (*group, error) {
	g := f.byID[string(field(req, 1))]
	if g == nil {
		return nil, status.Errorf(codes.NotFound, "node group %q is not served", field(req, 1))
	}
	return g, nil
}

// resize changes a group's size by delta within its limits (the floor keeps no machines).
func (f *floor) resize(req frame, delta int64) (*frame, error) {
	g, err := f.group(req)
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	size := int64(g.size) + delta
	if size < int64(g.min) || size > int64(g.max) {
		g.mu.Unlock()
		return nil, status.Errorf(codes.InvalidArgument, "size %d outside %d:%d", size, g.min, g.max)
	}
	g.size = int32(size)
	g.encode()
	g.mu.Unlock()
	f.encodeList()
	return &f.empty, nil
}

func (f *floor) answers() map[string]func(frame) (*frame, error) {
	empty := func(frame) (*frame, error) { return &f.empty, nil }
	return map[string]func(frame) (*frame, error){
		"NodeGroups": func(frame) (*frame, error) { return f.list.Load(), nil },
		"NodeGroupForNode": func(req frame) (*frame, error) {
			node := field(req, 1)
			g := f.byNode[string(field(node, 1))]
			if g == nil {
				g = f.byNode[string(field(node, 2))]
			}
			if g == nil {
				return &f.notFound, nil
			}
			return g.forNode.Load(), nil
		},
		"PricingNodePrice": func(req frame) (*frame, error) {
			node := field(req, 1)
			g := f.byNode[string(field(node, 1))]
			if g == nil {
				g = f.byNode[string(field(node, 2))]
			}
			if g == nil {
				g = f.byID[templateGroup(string(field(node, 2)))]
			}
			if g == nil || g.nodePrice == nil {
				return nil, errNoPrice
			}
			return g.nodePrice, nil
		},
		"PricingPodPrice": func(req frame) (*frame, error) {
			pod := field(req, 4)
			if pod == nil {
				pod = field(req, 1)
			}
			if a := f.podPrices[string(field(field(pod, 1), 1))]; a != nil {
				return a, nil
			}
			if f.anyPodPrice != nil {
				return f.anyPodPrice, nil
			}
			return nil, errNoPrice
		},
		"GPULabel":             empty,
		"GetAvailableGPUTypes": empty,
		"Cleanup":              empty,
		"Refresh":              empty,
		"NodeGroupTargetSize": func(req frame) (*frame, error) {
			g, err := f.group(req)
			if err != nil {
				return nil, err
			}
			return g.target.Load(), nil
		},
		"NodeGroupIncreaseSize": func(req frame) (*frame, error) {
			if f.refuseIncrease != nil {
				return nil, f.refuseIncrease
			}
			return f.resize(idOf(req, 2), varint(req, 1))
		},
		"NodeGroupDeleteNodes": func(req frame) (*frame, error) {
			nodes := int64(0)
			for msg := []byte(req); len(msg) > 0; {
				n, typ, l := protowire.ConsumeTag(msg)
				if l < 0 {
					break
				}
				msg = msg[l:]
				m := protowire.ConsumeFieldValue(n, typ, msg)
				if m < 0 {
					break
				}
				if n == 1 {
					nodes++
				}
				msg = msg[m:]
			}
			return f.resize(idOf(req, 2), -nodes)
		},
		"NodeGroupDecreaseTargetSize": func(req frame) (*frame, error) {
			return f.resize(idOf(req, 2), varint(req, 1))
		},
		"NodeGroupNodes": func(req frame) (*frame, error) {
			g, err := f.group(req)
			if err != nil {
				return nil, err
			}
			return &g.instances, nil
		},
		"NodeGroupTemplateNodeInfo": func(req frame) (*frame, error) {
			g, err := f.group(req)
			if err != nil {
				return nil, err
			}
			if g.template == nil {
				return nil, errNoTemplate
			}
			return g.template, nil
		},
		"NodeGroupGetOptions": func(req frame) (*frame, error) {
			g, err := f.group(req)
			if err != nil {
				return nil, err
			}
			if g.options == nil {
				return &f.empty, nil
			}
			return g.optionsAnswer(field(req, 2)), nil
		},
	}
}

func main() {
	address := flag.String("address", "127.0.0.1:0", "HOST:PORT to listen on")
	namespace := flag.String("namespace", "default", "namespace of the node groups (ids are NAMESPACE/pool-G)")
	groups := flag.Int("groups", 100, "node groups")
	perGroup := flag.Int("per-group", 50, "nodes per group")
	prefix := flag.String("provider-prefix", "virtual://bench/", "providerID of node N is PREFIX+N")
	answersPath := flag.String("answers", "", "JSON file of prices, options, templates and scale-up refusal (see answersFile)")
	flag.Parse()

	var recorded answersFile
	if *answersPath != "" {
		raw, err := os.ReadFile(*answersPath)
		if err == nil {
			err = json.Unmarshal(raw, &recorded)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	f, err := newFloor(*namespace, *prefix, *groups, *perGroup, recorded)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	answers := f.answers()
	names := make([]string, 0, len(answers))
	for name := range answers {
		names = append(names, name)
	}
	sort.Strings(names)
	counts := make([]atomic.Int64, len(names))
	desc := grpc.ServiceDesc{ServiceName: service, HandlerType: (*any)(nil)}
	for i, name := range names {
		answer, count := answers[name], &counts[i]
		desc.Methods = append(desc.Methods, grpc.MethodDesc{
			MethodName: name,
			Handler: func(_ any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
				var req frame
				if err := dec(&req); err != nil {
					return nil, err
				}
				count.Add(1)
				return answer(req)
			},
		})
	}
	lis, err := net.Listen("tcp", *address)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	//nolint:staticcheck // the pass-through codec needs the v1 codec interface
	srv := grpc.NewServer(grpc.ForceServerCodec(passThrough{}))
	srv.RegisterService(&desc, struct{}{})
	fmt.Printf("listening on %s\n", lis.Addr())
	stats := func() {
		line := "stats"
		var ru syscall.Rusage
		if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
			line += fmt.Sprintf(" cpu_us=%d", (ru.Utime.Nano()+ru.Stime.Nano())/1e3)
		}
		for i, name := range names {
			line += fmt.Sprintf(" %s=%d", name, counts[i].Load())
		}
		fmt.Println(line)
	}
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGUSR1, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		for sig := range signals {
			stats()
			if sig != syscall.SIGUSR1 {
				srv.Stop()
				return
			}
		}
	}()
	if err := srv.Serve(lis); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
