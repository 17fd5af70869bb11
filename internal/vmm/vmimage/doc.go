// Package vmimage builds, at run time and into a keyed cache, what a VM boots:
// the PVH vmlinux extracted from a distribution kernel, the initramfs with our
// stage-1 init, the default root filesystem, the engrams bundle disk and overlays.
package vmimage
