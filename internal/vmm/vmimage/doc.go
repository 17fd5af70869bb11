// Package vmimage builds, into a cache keyed by content, what a VM boots: the PVH
// vmlinux, the initramfs with our stage-1 init, the root filesystem, the bundle disk
// and overlays. Builds are reproducible, so every host names and fills them alike.
package vmimage
