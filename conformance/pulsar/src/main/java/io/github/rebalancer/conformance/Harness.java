package io.github.rebalancer.conformance;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.google.common.collect.Multimap;
import java.io.BufferedReader;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.lang.reflect.Field;
import java.lang.reflect.Proxy;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.pulsar.broker.PulsarService;
import org.apache.pulsar.broker.ServiceConfiguration;
import org.apache.pulsar.broker.loadbalance.LoadData;
import org.apache.pulsar.broker.loadbalance.LoadSheddingStrategy;
import org.apache.pulsar.broker.loadbalance.ModularLoadManagerStrategy;
import org.apache.pulsar.broker.loadbalance.extensions.BrokerRegistry;
import org.apache.pulsar.broker.loadbalance.extensions.LoadManagerContext;
import org.apache.pulsar.broker.loadbalance.extensions.data.BrokerLoadData;
import org.apache.pulsar.broker.loadbalance.extensions.data.TopBundlesLoadData;
import org.apache.pulsar.broker.loadbalance.extensions.models.TopKBundles;
import org.apache.pulsar.broker.loadbalance.extensions.models.Unload;
import org.apache.pulsar.broker.loadbalance.extensions.models.UnloadCounter;
import org.apache.pulsar.broker.loadbalance.extensions.models.UnloadDecision;
import org.apache.pulsar.broker.loadbalance.extensions.scheduler.TransferShedder;
import org.apache.pulsar.broker.loadbalance.impl.AvgShedder;
import org.apache.pulsar.broker.loadbalance.impl.LeastLongTermMessageRate;
import org.apache.pulsar.broker.loadbalance.impl.LeastResourceUsageWithWeight;
import org.apache.pulsar.broker.loadbalance.impl.ModularLoadManagerImpl;
import org.apache.pulsar.broker.loadbalance.impl.OverloadShedder;
import org.apache.pulsar.broker.loadbalance.impl.ThresholdShedder;
import org.apache.pulsar.broker.loadbalance.impl.UniformLoadShedder;
import org.apache.pulsar.common.util.FieldParser;
import org.apache.pulsar.policies.data.loadbalancer.BrokerData;
import org.apache.pulsar.policies.data.loadbalancer.BundleData;
import org.apache.pulsar.policies.data.loadbalancer.LocalBrokerData;
import org.apache.pulsar.policies.data.loadbalancer.NamespaceBundleStats;
import org.apache.pulsar.policies.data.loadbalancer.ResourceUsage;
import org.apache.pulsar.policies.data.loadbalancer.SystemResourceUsage;
import org.apache.pulsar.policies.data.loadbalancer.TimeAverageBrokerData;
import org.apache.pulsar.policies.data.loadbalancer.TimeAverageMessageData;

/**
 * Drives Pulsar's own shedding and placement classes on load snapshots (JSON Lines on stdin, one case
 * per line) and prints each case's decisions (JSON Lines on stdout). One JVM serves a whole test session.
 *
 * <p>The harness only builds Pulsar's inputs (LoadData, BrokerLoadData, TopBundlesLoadData, a
 * ServiceConfiguration) and plays the callers' roles: the leader that passes the candidates, and, for
 * TransferShedder, the UnloadScheduler that remembers which brokers it just unloaded. Every decision
 * is Pulsar's. The snapshot format is documented in conformance/pulsar_conformance.py.
 */
public final class Harness {
    private static final ObjectMapper JSON = new ObjectMapper();

    /** What ModularLoadManagerImpl counts for a reported bundle it has no data for. */
    private static final NamespaceBundleStats DEFAULT_STATS = new NamespaceBundleStats();

    static {
        DEFAULT_STATS.msgRateIn = ModularLoadManagerImpl.DEFAULT_MESSAGE_RATE;
        DEFAULT_STATS.msgRateOut = ModularLoadManagerImpl.DEFAULT_MESSAGE_RATE;
        DEFAULT_STATS.msgThroughputIn = ModularLoadManagerImpl.DEFAULT_MESSAGE_THROUGHPUT;
        DEFAULT_STATS.msgThroughputOut = ModularLoadManagerImpl.DEFAULT_MESSAGE_THROUGHPUT;
    }

    private Harness() {
    }

    public static void main(String[] args) throws Exception {
        // Pulsar logs through log4j2, whose default appender writes to stdout: keep stdout for results.
        PrintStream results = new PrintStream(new FileOutputStream(FileDescriptor.out), false, StandardCharsets.UTF_8);
        System.setOut(System.err);
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) {
                continue;
            }
            ObjectNode out;
            String id = "";
            try {
                JsonNode c = JSON.readTree(line);
                id = c.path("id").asText();
                out = run(c);
            } catch (Throwable e) {
                out = JSON.createObjectNode();
                out.put("id", id);
                StringWriter trace = new StringWriter();
                e.printStackTrace(new PrintWriter(trace));
                out.put("error", trace.toString());
            }
            results.println(JSON.writeValueAsString(out));
            results.flush();
        }
        results.flush();
        // Pulsar's static initialisers may leave non-daemon threads behind.
        System.exit(0);
    }

    static ObjectNode run(JsonNode c) throws Exception {
        String strategy = c.get("strategy").asText();
        ServiceConfiguration conf = new ServiceConfiguration();
        // Not modelled by the ports: every report is fresh, and no bundle carries isolation or
        // anti-affinity policies (so TopKBundles needs no metadata store to look them up).
        conf.setLoadBalancerBrokerLoadDataTTLInSeconds(1_000_000_000_000L);
        conf.setLoadBalancerSheddingBundlesWithPoliciesEnabled(true);
        FieldParser.update(strings(c.get("conf")), conf);
        ArrayNode cycles = switch (strategy) {
            case "TransferShedder" -> runTransfer(c, conf);
            case "ThresholdShedder", "OverloadShedder", "UniformLoadShedder", "AvgShedder",
                    "LeastLongTermMessageRate", "LeastResourceUsageWithWeight" -> runModular(c, strategy, conf);
            default -> throw new IllegalArgumentException("unknown strategy " + strategy);
        };
        ObjectNode out = JSON.createObjectNode();
        out.put("id", c.path("id").asText());
        out.set("cycles", cycles);
        return out;
    }

    // ---- the modular load manager: LoadSheddingStrategy and ModularLoadManagerStrategy ----

    private static ArrayNode runModular(JsonNode c, String strategy, ServiceConfiguration conf) throws Exception {
        LoadSheddingStrategy shedder = null;
        ModularLoadManagerStrategy placement = null;
        switch (strategy) {
            case "ThresholdShedder" -> shedder = new ThresholdShedder();
            case "OverloadShedder" -> shedder = new OverloadShedder();
            case "UniformLoadShedder" -> shedder = new UniformLoadShedder();
            case "AvgShedder" -> {
                AvgShedder avg = new AvgShedder();
                shedder = avg;
                placement = avg;
            }
            case "LeastLongTermMessageRate" -> placement = new LeastLongTermMessageRate();
            default -> placement = new LeastResourceUsageWithWeight();
        }
        ArrayNode outCycles = JSON.createArrayNode();
        Set<String> previous = null;
        boolean first = true;
        for (JsonNode cycle : c.get("cycles")) {
            FieldParser.update(strings(cycle.get("conf")), conf);
            Map<String, BundleData> bundles = new LinkedHashMap<>();
            LoadData loadData = loadData(cycle, bundles);
            Set<String> active = new LinkedHashSet<>(names(cycle.get("brokers")));
            if (previous != null && !previous.equals(active)) {
                if (shedder != null) {
                    shedder.onActiveBrokersChange(active);
                }
                if (placement != null && placement != shedder) {
                    placement.onActiveBrokersChange(active);
                }
            }
            previous = active;
            if (first) {
                seedModular(c.get("state"), shedder, placement, bundles);
                first = false;
            }
            ObjectNode out = JSON.createObjectNode();
            ArrayNode unloads = out.putArray("unloads");
            List<String> unloaded = new ArrayList<>();
            if (shedder != null && cycle.path("shed").asBoolean(true)) {
                Multimap<String, String> selected = shedder.findBundlesForUnloading(loadData, conf);
                List<String[]> rows = new ArrayList<>();
                selected.forEach((broker, bundle) -> rows.add(new String[] {bundle, broker}));
                rows.sort((a, b) -> (a[0] + "\u0000" + a[1]).compareTo(b[0] + "\u0000" + b[1]));
                for (String[] row : rows) {
                    ArrayNode r = unloads.addArray();
                    r.add(row[0]).add(row[1]).addNull();
                    unloaded.add(row[0]);
                }
            }
            // The placement requests: the bundles just unloaded, if asked, then the listed ones.
            List<Map.Entry<String, List<String>>> requests = new ArrayList<>();
            if (cycle.path("placeUnloaded").asBoolean(false)) {
                List<String> targets = new ArrayList<>(active);
                targets.removeAll(names(cycle.get("placeExclude")));
                for (String bundle : unloaded) {
                    requests.add(Map.entry(bundle, targets));
                }
            }
            for (JsonNode p : iterable(cycle.get("place"))) {
                requests.add(Map.entry(p.get("bundle").asText(), names(p.get("candidates"))));
            }
            if (placement == null && !requests.isEmpty()) {
                throw new IllegalArgumentException(strategy + " places nothing");
            }
            ArrayNode placements = out.putArray("placements");
            for (Map.Entry<String, List<String>> request : requests) {
                String bundle = request.getKey();
                Set<String> candidates = new HashSet<>();
                for (String name : new TreeSet<>(request.getValue())) {
                    candidates.add(name);
                }
                BundleData data = bundles.getOrDefault(bundle, emptyBundleData());
                Collection<String> chosen = choices(placement, candidates, data, loadData, conf);
                ObjectNode r = placements.addObject();
                r.put("bundle", bundle);
                ArrayNode set = r.putArray("candidates");
                new TreeSet<>(chosen).forEach(set::add);
            }
            outCycles.add(out);
        }
        return outCycles;
    }

    /** The brokers the placement may pick: one when it decides, all it draws from when it draws at random. */
    @SuppressWarnings("unchecked")
    private static Collection<String> choices(ModularLoadManagerStrategy placement, Set<String> candidates,
                                              BundleData data, LoadData loadData, ServiceConfiguration conf)
            throws Exception {
        if (placement instanceof AvgShedder avg) {
            // AvgShedder returns its plan if the plan names a candidate, else a random candidate.
            Map<BundleData, String> plan = (Map<BundleData, String>) field(avg, "bundleBrokerMap");
            String planned = plan.get(data);
            Collection<String> expected = planned != null && candidates.contains(planned)
                    ? List.of(planned) : List.copyOf(candidates);
            Optional<String> got = avg.selectBroker(candidates, data, loadData, conf);
            if (got.isEmpty() || !expected.contains(got.get())) {
                throw new IllegalStateException("AvgShedder chose " + got + ", outside " + expected);
            }
            return expected;
        }
        Optional<String> got = placement.selectBroker(candidates, data, loadData, conf);
        if (got.isEmpty()) {
            return List.of();
        }
        // Both draw uniformly from their bestBrokers list, which they keep after the call.
        List<String> best = new ArrayList<>((List<String>) field(placement, "bestBrokers"));
        if (!best.contains(got.get())) {
            throw new IllegalStateException(placement.getClass().getSimpleName() + " chose " + got
                    + ", outside " + best);
        }
        return best;
    }

    @SuppressWarnings("unchecked")
    private static void seedModular(JsonNode state, LoadSheddingStrategy shedder, ModularLoadManagerStrategy placement,
                                    Map<String, BundleData> bundles) throws Exception {
        if (state == null || state.isNull()) {
            return;
        }
        if (state.has("plan")) {
            Map<BundleData, String> plan = (Map<BundleData, String>) field(placement, "bundleBrokerMap");
            for (Map.Entry<String, JsonNode> e : entries(state.get("plan"))) {
                plan.put(bundles.getOrDefault(e.getKey(), emptyBundleData()), e.getValue().asText());
            }
        }
        if (state.has("usage")) {
            Map<String, Double> usage = (Map<String, Double>) field(placement, "brokerAvgResourceUsageWithWeight");
            for (Map.Entry<String, JsonNode> e : entries(state.get("usage"))) {
                usage.put(e.getKey(), e.getValue().asDouble());
            }
        }
    }

    private static LoadData loadData(JsonNode cycle, Map<String, BundleData> bundles) {
        LoadData loadData = new LoadData();
        for (JsonNode b : iterable(cycle.get("bundles"))) {
            BundleData data = bundleData(b);
            bundles.put(b.get("name").asText(), data);
            loadData.getBundleData().put(b.get("name").asText(), data);
        }
        JsonNode preallocated = cycle.get("preallocated");
        for (JsonNode b : iterable(cycle.get("brokers"))) {
            LocalBrokerData local = new LocalBrokerData();
            local.setCpu(usage(b.get("cpu")));
            local.setMemory(usage(b.get("memory")));
            local.setDirectMemory(usage(b.get("directMemory")));
            local.setBandwidthIn(usage(b.get("bandwidthIn")));
            local.setBandwidthOut(usage(b.get("bandwidthOut")));
            local.setMsgRateIn(b.get("msgRateIn").asDouble());
            local.setMsgRateOut(b.get("msgRateOut").asDouble());
            local.setMsgThroughputIn(b.get("msgThroughputIn").asDouble());
            local.setMsgThroughputOut(b.get("msgThroughputOut").asDouble());
            for (String bundle : names(b.get("bundles"))) {
                local.getBundles().add(bundle);
            }
            BrokerData brokerData = new BrokerData(local);
            // As ModularLoadManagerImpl.updateBundleData does from the broker's reported bundles.
            brokerData.setTimeAverageData(new TimeAverageBrokerData(local.getBundles(), loadData.getBundleData(),
                    DEFAULT_STATS));
            String name = b.get("name").asText();
            if (preallocated != null && preallocated.has(name)) {
                for (String bundle : names(preallocated.get(name))) {
                    brokerData.getPreallocatedBundleData().put(bundle, bundles.getOrDefault(bundle, emptyBundleData()));
                }
            }
            loadData.getBrokerData().put(name, brokerData);
        }
        for (Map.Entry<String, JsonNode> e : entries(cycle.get("recentlyUnloaded"))) {
            loadData.getRecentlyUnloadedBundles().put(e.getKey(), e.getValue().asLong());
        }
        return loadData;
    }

    private static BundleData bundleData(JsonNode b) {
        BundleData data = new BundleData();
        data.setShortTermData(messageData(b.get("shortTerm"), b.path("numSamples").asInt(0)));
        data.setLongTermData(messageData(b.get("longTerm"), b.path("numSamples").asInt(0)));
        return data;
    }

    private static TimeAverageMessageData messageData(JsonNode rates, int numSamples) {
        TimeAverageMessageData data = new TimeAverageMessageData();
        data.setMsgRateIn(rates.get(0).asDouble());
        data.setMsgRateOut(rates.get(1).asDouble());
        data.setMsgThroughputIn(rates.get(2).asDouble());
        data.setMsgThroughputOut(rates.get(3).asDouble());
        data.setNumSamples(numSamples);
        return data;
    }

    private static BundleData emptyBundleData() {
        BundleData data = new BundleData();
        data.setShortTermData(new TimeAverageMessageData());
        data.setLongTermData(new TimeAverageMessageData());
        return data;
    }

    private static ResourceUsage usage(JsonNode pair) {
        return new ResourceUsage(pair.get(0).asDouble(), pair.get(1).asDouble());
    }

    // ---- the extensible load manager: TransferShedder through NamespaceUnloadStrategy ----

    private static ArrayNode runTransfer(JsonNode c, ServiceConfiguration conf) throws Exception {
        UnloadCounter counter = new UnloadCounter();
        TransferShedder shedder = new TransferShedder(counter);
        PulsarService pulsar = pulsarWith(conf);
        Map<String, BrokerLoadData> reports = new HashMap<>();
        // UnloadScheduler's map: the source broker of every unload, at the time it was unloaded.
        Map<String, Long> recentlyUnloadedBrokers = new HashMap<>();
        ArrayNode outCycles = JSON.createArrayNode();
        for (JsonNode cycle : c.get("cycles")) {
            FieldParser.update(strings(cycle.get("conf")), conf);
            long now = Math.round(cycle.get("timestamp").asDouble() * 1000);
            if (now <= 0) {
                throw new IllegalArgumentException("TransferShedder cycles need a timestamp > 0");
            }
            Map<String, JsonNode> data = new HashMap<>();
            for (JsonNode b : iterable(cycle.get("bundles"))) {
                data.put(b.get("name").asText(), b);
            }
            Set<String> active = new LinkedHashSet<>(names(cycle.get("brokers")));
            reports.keySet().retainAll(active);  // a broker that left reports afresh when it returns
            MemoryStore<BrokerLoadData> brokerStore = new MemoryStore<>();
            MemoryStore<TopBundlesLoadData> topStore = new MemoryStore<>();
            for (JsonNode b : iterable(cycle.get("brokers"))) {
                String name = b.get("name").asText();
                BrokerLoadData report = reports.computeIfAbsent(name, k -> new BrokerLoadData());
                SystemResourceUsage usage = new SystemResourceUsage();
                usage.setCpu(usage(b.get("cpu")));
                usage.setMemory(usage(b.get("memory")));
                usage.setDirectMemory(usage(b.get("directMemory")));
                usage.setBandwidthIn(usage(b.get("bandwidthIn")));
                usage.setBandwidthOut(usage(b.get("bandwidthOut")));
                List<String> owned = names(b.get("bundles"));
                report.update(usage, b.get("msgThroughputIn").asDouble(), b.get("msgThroughputOut").asDouble(),
                        b.get("msgRateIn").asDouble(), b.get("msgRateOut").asDouble(), owned.size(), 0, conf);
                setField(report, "updatedAt", now);  // the report's time is the snapshot's, not the wall clock
                brokerStore.pushAsync(name, report);
                // What the broker's TopBundleLoadDataReporter publishes: its bundles' current stats.
                Map<String, NamespaceBundleStats> stats = new ConcurrentHashMap<>();
                for (String bundle : owned) {
                    JsonNode d = data.get(bundle);
                    if (d != null) {
                        stats.put(bundle, bundleStats(d.get("shortTerm")));
                    }
                }
                TopKBundles topK = new TopKBundles(pulsar);
                topK.update(stats, conf.getLoadBalancerMaxNumberOfBundlesInBundleLoadReport());
                topStore.pushAsync(name, topK.getLoadData());
            }
            for (Map.Entry<String, JsonNode> e : entries(cycle.get("recentlyUnloadedBrokers"))) {
                recentlyUnloadedBrokers.put(e.getKey(), e.getValue().asLong());
            }
            Map<String, Long> recentlyUnloadedBundles = new HashMap<>();
            for (Map.Entry<String, JsonNode> e : entries(cycle.get("recentlyUnloaded"))) {
                recentlyUnloadedBundles.put(e.getKey(), e.getValue().asLong());
            }
            LoadManagerContext context = context(conf, brokerStore, topStore, registry(active));
            long failures = failures(counter);
            Set<UnloadDecision> decisions = shedder.findBundlesForUnloading(context, recentlyUnloadedBundles,
                    recentlyUnloadedBrokers);
            if (failures(counter) != failures) {
                throw new IllegalStateException("TransferShedder failed (see its log on stderr)");
            }
            List<Unload> unloads = new ArrayList<>();
            decisions.forEach(d -> unloads.add(d.getUnload()));
            unloads.sort((a, b) -> (a.serviceUnit() + "\u0000" + a.sourceBroker())
                    .compareTo(b.serviceUnit() + "\u0000" + b.sourceBroker()));
            ObjectNode out = JSON.createObjectNode();
            ArrayNode rows = out.putArray("unloads");
            for (Unload u : unloads) {
                ArrayNode r = rows.addArray();
                r.add(u.serviceUnit()).add(u.sourceBroker());
                if (u.destBroker().isPresent()) {
                    r.add(u.destBroker().get());
                } else {
                    r.addNull();
                }
                recentlyUnloadedBrokers.put(u.sourceBroker(), now);
            }
            out.putArray("placements");
            outCycles.add(out);
        }
        return outCycles;
    }

    private static long failures(UnloadCounter counter) {
        AtomicLong n = counter.getBreakdownCounters().get(UnloadDecision.Label.Failure)
                .get(UnloadDecision.Reason.Unknown);
        return n == null ? 0 : n.get();
    }

    private static NamespaceBundleStats bundleStats(JsonNode rates) {
        NamespaceBundleStats stats = new NamespaceBundleStats();
        stats.msgRateIn = rates.get(0).asDouble();
        stats.msgRateOut = rates.get(1).asDouble();
        stats.msgThroughputIn = rates.get(2).asDouble();
        stats.msgThroughputOut = rates.get(3).asDouble();
        return stats;
    }

    /** TopKBundles only reads the configuration from PulsarService; no broker is started. */
    private static PulsarService pulsarWith(ServiceConfiguration conf) throws Exception {
        Field theUnsafe = Class.forName("sun.misc.Unsafe").getDeclaredField("theUnsafe");
        theUnsafe.setAccessible(true);
        Object unsafe = theUnsafe.get(null);
        PulsarService pulsar = (PulsarService) unsafe.getClass().getMethod("allocateInstance", Class.class)
                .invoke(unsafe, PulsarService.class);
        setField(pulsar, "config", conf);
        return pulsar;
    }

    private static BrokerRegistry registry(Set<String> brokers) {
        Map<String, Object> available = new HashMap<>();
        brokers.forEach(b -> available.put(b, null));  // TransferShedder only reads the broker ids
        return (BrokerRegistry) Proxy.newProxyInstance(Harness.class.getClassLoader(),
                new Class<?>[] {BrokerRegistry.class}, (proxy, method, args) -> {
                    if (method.getName().equals("getAvailableBrokerLookupDataAsync")) {
                        return CompletableFuture.completedFuture(available);
                    }
                    throw new UnsupportedOperationException(method.getName());
                });
    }

    private static LoadManagerContext context(ServiceConfiguration conf, MemoryStore<BrokerLoadData> brokers,
                                              MemoryStore<TopBundlesLoadData> topBundles, BrokerRegistry registry) {
        return new LoadManagerContext() {
            @Override
            public ServiceConfiguration brokerConfiguration() {
                return conf;
            }

            @Override
            public org.apache.pulsar.broker.loadbalance.extensions.store.LoadDataStore<BrokerLoadData>
                    brokerLoadDataStore() {
                return brokers;
            }

            @Override
            public org.apache.pulsar.broker.loadbalance.extensions.store.LoadDataStore<TopBundlesLoadData>
                    topBundleLoadDataStore() {
                return topBundles;
            }

            @Override
            public BrokerRegistry brokerRegistry() {
                return registry;
            }
        };
    }

    // ---- JSON and reflection helpers ----

    private static Map<String, String> strings(JsonNode node) {
        Map<String, String> out = new LinkedHashMap<>();
        for (Map.Entry<String, JsonNode> e : entries(node)) {
            out.put(e.getKey(), e.getValue().isTextual() ? e.getValue().asText() : e.getValue().toString());
        }
        return out;
    }

    private static List<String> names(JsonNode node) {
        List<String> out = new ArrayList<>();
        for (JsonNode n : iterable(node)) {
            out.add(n.isObject() ? n.get("name").asText() : n.asText());
        }
        return out;
    }

    private static Iterable<JsonNode> iterable(JsonNode node) {
        return node == null || node.isNull() ? List.of() : node;
    }

    private static Iterable<Map.Entry<String, JsonNode>> entries(JsonNode node) {
        if (node == null || node.isNull()) {
            return List.of();
        }
        Iterator<Map.Entry<String, JsonNode>> it = node.fields();
        return () -> it;
    }

    private static Object field(Object target, String name) throws Exception {
        Field f = target.getClass().getDeclaredField(name);
        f.setAccessible(true);
        return f.get(target);
    }

    private static void setField(Object target, String name, Object value) throws Exception {
        Field f = target.getClass().getDeclaredField(name);
        f.setAccessible(true);
        f.set(target, value);
    }
}
