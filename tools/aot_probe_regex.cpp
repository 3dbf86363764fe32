// The one thing AOTInductor's model constructor did when it died on the lent H100 (2026-12-07):
// parse its device string with std::regex (torch/csrc/inductor/aoti_runtime/model_base.h,
// parse_device_str). Built as a shared library two ways, once linked against the shared libstdc++
// and once with its own copy (-static-libstdc++, what the H100's wrapper.so carried), and loaded by
// ctypes into a process that imported torch (which loaded the shared libstdc++ first) or did not.
// Two copies of libstdc++'s locale in one process is what std::regex's bracket matcher trips on.
//   c++ -O2 -shared -fPIC tools/aot_probe_regex.cpp -o regex_shared.so
//   c++ -O2 -shared -fPIC -static-libstdc++ tools/aot_probe_regex.cpp -o regex_static.so
#include <regex>
#include <string>

// The device index of "cuda:3" (3), -1 for a bare "cuda", -2 for no match: model_base.h's pattern.
extern "C" int parse_device_index(const char* device) {
    std::regex re("(cpu|cuda|xpu|mps)(:([0-9]+))?");
    std::smatch match;
    std::string text(device);
    if (!std::regex_match(text, match, re)) return -2;
    return match[3].matched ? std::stoi(match[3].str()) : -1;
}
