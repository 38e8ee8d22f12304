// Module flannel-cni pins the source of flannel's CNI plugin. The plugin's
// own repository (flannel-io/cni-plugin) is not served by the module proxy;
// containernetworking/plugins v0.9.1 is the last release that carried it.
// Nothing imports this module.
module github.com/cloudtransit/transit/bundle/sources/flannel-cni

go 1.26.0

require github.com/containernetworking/plugins v0.9.1

require (
	github.com/Microsoft/go-winio v0.4.11 // indirect
	github.com/Microsoft/hcsshim v0.8.6 // indirect
	github.com/buger/jsonparser v0.0.0-20180808090653-f4dd9f5a6b44 // indirect
	github.com/containernetworking/cni v0.8.1 // indirect
	github.com/sirupsen/logrus v1.0.6 // indirect
	golang.org/x/crypto v0.0.0-20200622213623-75b288015ac9 // indirect
	golang.org/x/sys v0.0.0-20201117170446-d9b008d0a637 // indirect
)
