package io.github.rebalancer.conformance;

import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.function.BiConsumer;
import org.apache.pulsar.broker.loadbalance.extensions.store.LoadDataStore;

/**
 * The extensible load manager's load data store, in memory. Backed by a ConcurrentHashMap, as the
 * table view behind Pulsar's own store is, so entries iterate in the order Pulsar's would.
 */
final class MemoryStore<T> implements LoadDataStore<T> {
    private final Map<String, T> map = new ConcurrentHashMap<>();

    @Override
    public CompletableFuture<Void> pushAsync(String key, T loadData) {
        map.put(key, loadData);
        return CompletableFuture.completedFuture(null);
    }

    @Override
    public CompletableFuture<Void> removeAsync(String key) {
        map.remove(key);
        return CompletableFuture.completedFuture(null);
    }

    @Override
    public Optional<T> get(String key) {
        return Optional.ofNullable(map.get(key));
    }

    @Override
    public void forEach(BiConsumer<String, T> action) {
        map.forEach(action);
    }

    @Override
    public Set<Map.Entry<String, T>> entrySet() {
        return map.entrySet();
    }

    @Override
    public int size() {
        return map.size();
    }

    @Override
    public void closeTableView() {
    }

    @Override
    public void start() {
    }

    @Override
    public void init() {
    }

    @Override
    public void startTableView() {
    }

    @Override
    public void startProducer() {
    }

    @Override
    public void close() {
    }
}
