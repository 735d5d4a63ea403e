// A vector with its elements inside the object, for the small per-dispatch lists
// (bindings, push-constant bytes, specialization constants, an op's dispatches). Recording
// a decode step builds some hundred of these, and a replay rebuilds them for every token:
// kept off the heap, they cost no allocation and no free. Holding more than N elements is
// a programming error of vkattn's own (the sizes are bounded by the kernels), reported as
// std::length_error rather than written past the end.
#pragma once

#include <algorithm>
#include <compare>
#include <cstddef>
#include <cstring>
#include <initializer_list>
#include <new>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

namespace vkattn::detail {

template <class T, std::size_t N>
class InlineVector {
 public:
  InlineVector() = default;
  InlineVector(std::initializer_list<T> items) {
    for (const T& x : items) push_back(x);
  }
  InlineVector(const InlineVector& o) { assign(o); }
  InlineVector(InlineVector&& o) noexcept(std::is_nothrow_move_constructible_v<T>) { assign(std::move(o)); }
  InlineVector& operator=(const InlineVector& o) {
    if (this != &o) {
      clear();
      assign(o);
    }
    return *this;
  }
  InlineVector& operator=(InlineVector&& o) noexcept(std::is_nothrow_move_constructible_v<T>) {
    if (this != &o) {
      clear();
      assign(std::move(o));
    }
    return *this;
  }
  ~InlineVector() { clear(); }

  template <class... Args>
  T& emplace_back(Args&&... args) {
    if (size_ == N) throw std::length_error("internal: more than " + std::to_string(N) + " elements in an InlineVector");
    T* p = ::new (static_cast<void*>(slot(size_))) T(std::forward<Args>(args)...);
    ++size_;
    return *p;
  }
  void push_back(const T& x) { emplace_back(x); }
  void push_back(T&& x) { emplace_back(std::move(x)); }
  void clear() noexcept {
    if constexpr (!std::is_trivially_destructible_v<T>) {
      for (std::size_t i = size_; i > 0; --i) data()[i - 1].~T();
    }
    size_ = 0;
  }
  // New elements are value-initialized (zero for the byte and word lists).
  void resize(std::size_t n) {
    if constexpr (std::is_trivially_copyable_v<T>) {
      if (n > N) {
        throw std::length_error("internal: " + std::to_string(n) + " elements in an InlineVector of " + std::to_string(N));
      }
      if (n > size_) std::memset(slot(size_), 0, (n - size_) * sizeof(T));
      size_ = n;
    } else {
      while (size_ > n) data()[--size_].~T();
      while (size_ < n) emplace_back();
    }
  }

  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  static constexpr std::size_t capacity() noexcept { return N; }
  T* data() noexcept { return std::launder(reinterpret_cast<T*>(storage_)); }
  const T* data() const noexcept { return std::launder(reinterpret_cast<const T*>(storage_)); }
  T& operator[](std::size_t i) noexcept { return data()[i]; }
  const T& operator[](std::size_t i) const noexcept { return data()[i]; }
  T* begin() noexcept { return data(); }
  T* end() noexcept { return data() + size_; }
  const T* begin() const noexcept { return data(); }
  const T* end() const noexcept { return data() + size_; }

  friend bool operator==(const InlineVector& a, const InlineVector& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }
  friend auto operator<=>(const InlineVector& a, const InlineVector& b) {
    return std::lexicographical_compare_three_way(a.begin(), a.end(), b.begin(), b.end());
  }

 private:
  void* slot(std::size_t i) noexcept { return storage_ + i * sizeof(T); }
  // Into an empty vector. Plain bytes and words are copied whole.
  template <class V>
  void assign(V&& o) {
    if constexpr (std::is_trivially_copyable_v<T>) {
      std::memcpy(storage_, o.storage_, o.size_ * sizeof(T));
      size_ = o.size_;
    } else if constexpr (std::is_rvalue_reference_v<V&&>) {
      for (T& x : o) emplace_back(std::move(x));
    } else {
      for (const T& x : o) push_back(x);
    }
  }

  alignas(T) unsigned char storage_[N * sizeof(T)];
  std::size_t size_ = 0;
};

}  // namespace vkattn::detail
