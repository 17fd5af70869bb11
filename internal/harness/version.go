package harness

import (
	"strconv"
	"strings"
)

// compareVersions compares dotted numeric versions ("2.28" < "2.36");
// parts that are not numbers count as 0. It orders glibc versions as
// guestapi.HarnessRequires.Compatible does.
func compareVersions(a, b string) int {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < max(len(as), len(bs)); i++ {
		var x, y int
		if i < len(as) {
			x, _ = strconv.Atoi(as[i])
		}
		if i < len(bs) {
			y, _ = strconv.Atoi(bs[i])
		}
		if x != y {
			if x < y {
				return -1
			}
			return 1
		}
	}
	return 0
}
