// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Which sanitizer a translation unit is built with, as GCC (`__SANITIZE_*__`) and clang
/// (`__has_feature`) each tell it: COMMX_ASAN and COMMX_TSAN, defined to 1 or not at all.

#if defined(__SANITIZE_ADDRESS__)
#define COMMX_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__)
#define COMMX_TSAN 1
#endif
#if defined(__has_feature)
#if __has_feature(address_sanitizer) && !defined(COMMX_ASAN)
#define COMMX_ASAN 1
#endif
#if __has_feature(thread_sanitizer) && !defined(COMMX_TSAN)
#define COMMX_TSAN 1
#endif
#endif
