// informer-peer: the client-go baseline for `make bench`. It does what the operator's caches do
// and nothing else: shared informers for all Pods and Nodes (managedFields stripped, as the
// operator's caches never hold them), no client-side rate limit (like controller-runtime's
// default), and reports
//
//	synced: pods=P nodes=N ms=T heap_inuse_kib=H
//
// once both caches hold the whole list, and runs until SIGTERM or SIGINT.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

// stripManagedFields drops metadata.managedFields before an object is stored (what
// controller-runtime's cache.TransformStripManagedFields does).
func stripManagedFields(obj interface{}) (interface{}, error) {
	if accessor, err := meta.Accessor(obj); err == nil {
		accessor.SetManagedFields(nil)
	}
	return obj, nil
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the cluster")
	flag.Parse()
	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
	config.QPS = -1 // no client-side limit
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	factory := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithTransform(stripManagedFields))
	pods := factory.Core().V1().Pods().Informer()
	nodes := factory.Core().V1().Nodes().Informer()
	start := time.Now()
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), pods.HasSynced, nodes.HasSynced) {
		fmt.Fprintln(os.Stderr, "error: caches did not sync")
		os.Exit(1)
	}
	elapsed := time.Since(start)
	var stats runtime.MemStats
	runtime.ReadMemStats(&stats)
	fmt.Printf("synced: pods=%d nodes=%d ms=%d heap_inuse_kib=%d\n", len(pods.GetStore().ListKeys()),
		len(nodes.GetStore().ListKeys()), elapsed.Milliseconds(), stats.HeapInuse/1024)
	<-ctx.Done()
	factory.Shutdown()
}
