package landlock

import (
	"testing"
	"unsafe"
)

func TestRulesetAttrLayout(t *testing.T) {
	if rulesetAttrSizeV6 != 24 {
		t.Errorf("sizeof(rulesetAttr) = %d; want 24", rulesetAttrSizeV6)
	}
	var a rulesetAttr
	if off := unsafe.Offsetof(a.scoped); off != 16 {
		t.Errorf("offsetof(scoped) = %d; want 16", off)
	}
}
