// Command machine-controller is gardener MCM's provider-side machine controller (its
// pkg/util/provider/app, unchanged) with the virtual-cloud driver of driver.go: the anchor that
// the scale benchmark compares this project's manager with. It takes the provider app's flags.
package main

import (
	"fmt"
	"os"

	_ "github.com/gardener/machine-controller-manager/pkg/util/client/metrics/prometheus"
	"github.com/gardener/machine-controller-manager/pkg/util/provider/app"
	"github.com/gardener/machine-controller-manager/pkg/util/provider/app/options"
	_ "github.com/gardener/machine-controller-manager/pkg/util/reflector/prometheus"
	_ "github.com/gardener/machine-controller-manager/pkg/util/workqueue/prometheus"
	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/component-base/cli/flag"
	"k8s.io/component-base/logs"
)

// The driver's client stands for a cloud API: like the virtual provider's cloud clients in
// lib/manager.ts it does not share the controllers' --kube-api-qps budget.
const (
	cloudQPS   = 1000
	cloudBurst = 1000
)

func main() {
	s := options.NewMCServer()
	s.AddFlags(pflag.CommandLine)
	flag.InitFlags()
	logs.InitLogs()
	defer logs.FlushLogs()

	if s.TargetKubeconfig == "" || s.TargetKubeconfig == "none" {
		fail(fmt.Errorf("the virtual cloud keeps its VMs as Nodes: --target-kubeconfig must name a kubeconfig file"))
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", s.TargetKubeconfig)
	if err != nil {
		fail(err)
	}
	cfg.QPS, cfg.Burst = cloudQPS, cloudBurst
	client, err := kubernetes.NewForConfig(rest.AddUserAgent(cfg, "virtual-cloud"))
	if err != nil {
		fail(err)
	}
	if err := app.Run(s, newVirtualDriver(client, make(chan struct{}))); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "%v\n", err)
	os.Exit(1)
}
