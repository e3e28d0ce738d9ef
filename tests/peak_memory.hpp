// Test helper: how much memory a piece of code took at its peak, from /proc/self/status.
//   resident: VmHWM (peak resident set) after, minus VmRSS before; the peak is reset first
//             (writing 5 to /proc/self/clear_refs), so an earlier peak of the process hides
//             nothing. Catches memory that was allocated and written (zero-filled weights).
//   address space: VmPeak after minus VmPeak before. Catches an allocation that was never
//             touched (a huge state buffer read into only partly), which resident memory misses;
//             blind to the part of it below an earlier, higher peak of the process, so run such
//             checks in a fresh process (ctest runs every test on its own).
#pragma once

#include <fstream>
#include <string>

namespace retnet::testing {

// A "Key:   1234 kB" field of /proc/self/status in KiB, or -1.
inline long status_kib(const std::string& key) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind(key + ":", 0) == 0) return std::stol(line.substr(key.size() + 1));
  return -1;
}

class PeakMemory {
 public:
  PeakMemory() {
    std::ofstream("/proc/self/clear_refs") << "5";  // resets VmHWM to the current VmRSS
    rss_before_ = status_kib("VmRSS");
    peak_before_ = status_kib("VmPeak");
  }
  /// MiB of resident memory taken at the peak since construction.
  long resident_mib() const { return (status_kib("VmHWM") - rss_before_) / 1024; }
  /// MiB of address space taken at the peak since construction (see above).
  long address_space_mib() const { return (status_kib("VmPeak") - peak_before_) / 1024; }

 private:
  long rss_before_ = 0, peak_before_ = 0;
};

}  // namespace retnet::testing
