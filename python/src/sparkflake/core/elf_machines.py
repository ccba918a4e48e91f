"""ELF ``e_machine`` values (System V ABI, glibc's elf.h) once: the numbers, the OCI
architecture each belongs to, and the two spellings the tools print (compose's messages use
the GNU triplet's lower-case name; the audit's records use readelf's)."""

from __future__ import annotations

EM_386 = 3
EM_MIPS = 8
EM_PPC = 20
EM_PPC64 = 21
EM_S390 = 22
EM_ARM = 40
EM_X86_64 = 62
EM_AARCH64 = 183
EM_RISCV = 243

# OCI config "architecture" (Go's GOARCH names) -> e_machine
MACHINE_BY_ARCHITECTURE = {
    "arm64": EM_AARCH64,
    "amd64": EM_X86_64,
    "arm": EM_ARM,
    "386": EM_386,
    "ppc64le": EM_PPC64,
    "s390x": EM_S390,
    "riscv64": EM_RISCV,
}
# lower-case names, as in compose's refusals ("… are not aarch64")
MACHINE_NAMES = {
    EM_386: "i386",
    EM_ARM: "arm",
    EM_X86_64: "x86_64",
    EM_AARCH64: "aarch64",
    EM_RISCV: "riscv",
    EM_MIPS: "mips",
    EM_PPC: "ppc",
    EM_PPC64: "ppc64",
    EM_S390: "s390",
}
# readelf's names, as the audit records them per layer
MACHINE_TITLES = {
    EM_AARCH64: "AArch64",
    EM_X86_64: "x86-64",
    EM_ARM: "ARM",
    EM_386: "i386",
    EM_PPC64: "PowerPC64",
    EM_S390: "S/390",
    EM_RISCV: "RISC-V",
}
