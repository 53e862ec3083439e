/* One FDE of 65,000 rows (a nop and a CFA change each): libdw replays an
 * FDE's program from its start for every row, so building its table took
 * 6.7 s of CPU (a 265 KB binary). See cfi_hostile.c. */
	.text
	.globl cfi_hostile_fn
	.type cfi_hostile_fn, @function
cfi_hostile_fn:
	.cfi_startproc
	.rept 32500
	nop
	.cfi_adjust_cfa_offset 8
	nop
	.cfi_adjust_cfa_offset -8
	.endr
	ret
	.cfi_endproc
	.size cfi_hostile_fn, .-cfi_hostile_fn
	.section .note.GNU-stack, "", @progbits
