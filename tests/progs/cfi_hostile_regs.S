/* An FDE that names register 1,000,000 and then saves and restores its
 * state 1,000 times: libdw sizes a frame's register file by the largest
 * register named (16 MB here) and copies it at each saved state, for each
 * row. 6.8 s of CPU for a 16 KB binary (register 10^8: 172 s, 2.3 GB).
 * See cfi_hostile.c. */
	.text
	.globl cfi_hostile_fn
	.type cfi_hostile_fn, @function
cfi_hostile_fn:
	.cfi_startproc
	.cfi_undefined 1000000
	.rept 1000
	.cfi_remember_state
	.cfi_restore_state
	.endr
	.rept 5
	nop
	.cfi_adjust_cfa_offset 8
	nop
	.cfi_adjust_cfa_offset -8
	.endr
	ret
	.cfi_endproc
	.size cfi_hostile_fn, .-cfi_hostile_fn
	.section .note.GNU-stack, "", @progbits
