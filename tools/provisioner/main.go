// Command provisioner serves the test cluster's default StorageClass (a pod on the kind node,
// with its service account): each claim gets a folder of its own under --root, world-writable,
// as kind's default (rancher's local-path-provisioner) makes them. The controller manager's built-in hostPath
// provisioner makes its folders 0750 and root-owned, and fsGroup does not apply to hostPath
// volumes, so a pod that runs as a non-root user (the chart's PostgreSQL, as uid 70) could not
// write its own claim. Built on sig-storage-lib-external-provisioner, the library every
// external provisioner uses; for one node, never for data anyone keeps.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v13/controller"
)

const name = "package-executor.local/hostpath"

type hostPath struct {
	root string
	node string
}

func (p *hostPath) Provision(_ context.Context, options controller.ProvisionOptions) (*v1.PersistentVolume, controller.ProvisioningState, error) {
	dir := filepath.Join(p.root, options.PVName)
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return nil, controller.ProvisioningFinished, err
	}
	// MkdirAll's mode passes through the umask; the point is a folder any user can write.
	if err := os.Chmod(dir, 0o777); err != nil {
		return nil, controller.ProvisioningFinished, err
	}
	directory := v1.HostPathDirectory
	return &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: options.PVName},
		Spec: v1.PersistentVolumeSpec{
			PersistentVolumeReclaimPolicy: *options.StorageClass.ReclaimPolicy,
			AccessModes:                   options.PVC.Spec.AccessModes,
			Capacity: v1.ResourceList{
				v1.ResourceStorage: options.PVC.Spec.Resources.Requests[v1.ResourceStorage],
			},
			PersistentVolumeSource: v1.PersistentVolumeSource{
				HostPath: &v1.HostPathVolumeSource{Path: dir, Type: &directory},
			},
			NodeAffinity: &v1.VolumeNodeAffinity{Required: &v1.NodeSelector{
				NodeSelectorTerms: []v1.NodeSelectorTerm{{MatchExpressions: []v1.NodeSelectorRequirement{{
					Key: "kubernetes.io/hostname", Operator: v1.NodeSelectorOpIn, Values: []string{p.node},
				}}}},
			}},
		},
	}, controller.ProvisioningFinished, nil
}

func (p *hostPath) Delete(_ context.Context, volume *v1.PersistentVolume) error {
	if volume.Spec.HostPath == nil || filepath.Dir(volume.Spec.HostPath.Path) != p.root {
		return fmt.Errorf("volume %s is not one of %s", volume.Name, p.root)
	}
	return os.RemoveAll(volume.Spec.HostPath.Path)
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "the kubeconfig to reach the API server with (none: in a pod, its service account)")
	root := flag.String("root", "", "the folder that holds the volumes")
	node := flag.String("node", "", "the node the volumes are on")
	flag.Parse()
	if *root == "" || *node == "" {
		fmt.Fprintln(os.Stderr, "usage: provisioner [--kubeconfig FILE] --root DIR --node NAME")
		os.Exit(2)
	}
	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		klog.Fatalf("kubeconfig: %v", err)
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		klog.Fatalf("client: %v", err)
	}
	if err := os.MkdirAll(*root, 0o755); err != nil {
		klog.Fatalf("root: %v", err)
	}
	absolute, err := filepath.Abs(*root)
	if err != nil {
		klog.Fatalf("root: %v", err)
	}
	controller.NewProvisionController(context.Background(), client, name,
		&hostPath{root: absolute, node: *node}, controller.LeaderElection(false)).
		Run(context.Background())
}
